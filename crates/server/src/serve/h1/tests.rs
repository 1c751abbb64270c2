//! The codec against hyper: heads hyper writes parsed here, and heads written here parsed
//! by hyper, compared as messages (status, method, target, each name's values), not bytes.
