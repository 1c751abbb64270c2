//! A concurrency permit held by a response body, released when the body is done with.

use std::sync::Arc;

use ratewarden_core::adaptive::Completion;
use ratewarden_core::Clock;
use ratewarden_policy::{GrantId, Verdict};

use crate::limits::Limits;

/// Releases an allowed request's concurrency permit when dropped: when its response body
/// has been sent, or dropped because the client went away (or the service's future was
/// dropped before it answered).
pub(crate) struct PermitGuard {
    pub(crate) limits: Arc<dyn Limits>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) id: Option<GrantId>,
    /// The verdict that carried the id: what proves the release is the holder's.
    pub(crate) owner: Arc<Verdict>,
    /// How the inner service answered, once it has: what adaptive rules learn from.
    /// `None` (the caller went away before the answer) teaches them nothing.
    pub(crate) completion: Option<Completion>,
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let owner = Arc::clone(&self.owner);
        ratewarden_policy::release_soon(Arc::clone(&self.limits).release(
            id,
            owner,
            self.completion,
            self.clock.now(),
        ));
    }
}
