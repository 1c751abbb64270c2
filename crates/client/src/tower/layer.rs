//! The layer.

use tower_layer::Layer;

use super::Retry;
use crate::Policy;

/// Wraps a client service in [`Retry`], sharing one [`Policy`] (its budget, pacing and
/// counters) among every service it builds.
///
/// # Examples
///
/// ```
/// use ratewarden_client::{tower::RetryLayer, Policy};
///
/// let policy = Policy::default();
/// let layer = RetryLayer::new(policy.clone());
/// // `layer.layer(client)` for any tower HTTP client; `policy.stats()` counts for all.
/// # let _ = layer;
/// ```
#[derive(Debug, Clone)]
pub struct RetryLayer {
    policy: Policy,
}

impl RetryLayer {
    /// A layer applying `policy`.
    pub fn new(policy: Policy) -> Self {
        Self { policy }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry::new(inner, self.policy.clone())
    }
}
