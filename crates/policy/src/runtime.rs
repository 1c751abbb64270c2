//! What a front door on tokio lends the engine: a [`Timer`] on its clock, and a way to
//! give a permit back from a `Drop` ([`PermitGuard`]). Shared by the server's doors and the
//! tower layer.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ratewarden_core::adaptive::Completion;
use ratewarden_core::Clock;

use crate::engine::Timer;

/// A clock, with tokio's timer for waits: what a door lends the engine so that a request
/// an adaptive rule's queue holds waits on tokio's timer while the engine reads the door's
/// clock (`TokioClock` under paused time in tests).
pub struct ClockTimer<'a>(pub &'a dyn Clock);

impl Timer for ClockTimer<'_> {
    fn now(&self) -> u64 {
        self.0.now()
    }

    fn sleep(&self, ns: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(Duration::from_nanos(ns)))
    }
}

/// Runs a release from a `Drop`: a store that answers at once (in memory) releases here,
/// before the next request can be decided; one a network away releases on a task of its
/// own. Outside a runtime the permit's lease lets it go.
pub fn release_soon(release: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) {
    let mut release = release;
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    if release.as_mut().poll(&mut context).is_pending() {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(release);
        }
    }
}

/// What gives a permit back: called once, when its [`PermitGuard`] is dropped, with how the
/// request went (`None` when that was never known), returning the release to run.
/// `Sync` as well, so that a response body holding the guard may be boxed as hyper's
/// `BoxBody` is.
pub type Release =
    Box<dyn FnOnce(Option<Completion>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Gives an allowed request's concurrency permit back when dropped: when its response has
/// been sent, or the client went away (or the future that would have answered was
/// dropped). The release it runs is the front door's own (it names the engine, the clock
/// and the verdict that carried the permit: the engine releases a permit only to its
/// owner), run by [`release_soon`].
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use ratewarden_policy::PermitGuard;
///
/// let released = Arc::new(AtomicBool::new(false));
/// let flag = Arc::clone(&released);
/// let guard = PermitGuard::new(Box::new(move |_completion| {
///     Box::pin(async move { flag.store(true, Ordering::Relaxed) })
/// }));
/// drop(guard);
/// assert!(released.load(Ordering::Relaxed));
/// ```
pub struct PermitGuard {
    release: Option<Release>,
    /// How the request went, once it has: what adaptive rules learn from. `None` (the
    /// client went away before the answer) teaches them nothing.
    pub completion: Option<Completion>,
}

impl PermitGuard {
    /// A guard that runs `release` when dropped.
    pub fn new(release: Release) -> Self {
        PermitGuard {
            release: Some(release),
            completion: None,
        }
    }
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release_soon(release(self.completion));
        }
    }
}
