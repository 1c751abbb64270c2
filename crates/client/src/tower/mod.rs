//! The policy as a tower layer, for any tower HTTP client (hyper-util's, tonic's channel).
//!
//! Requests must be `http::Request<B>` with a `B: Clone` body (such as `Full<Bytes>`), so a
//! retry can send it again.

mod layer;
mod service;

pub use layer::RetryLayer;
pub use service::Retry;
