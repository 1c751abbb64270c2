//! Max-min fairness ("water filling"), as the core's fleet shares compute it: whoever wants
//! less than an equal share gets what it wants; what is left is shared equally among the
//! rest.

pub use ratewarden_core::lease::{max_min, max_min_weighted};
