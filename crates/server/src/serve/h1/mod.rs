//! The HTTP/1.1 codec under the lean paths: request heads in, response heads in and out,
//! body framing and chunked bodies. It knows nothing of the rules, the engine or the server.

pub(crate) mod answer;
pub(crate) mod chunked;
