//! What a front door on tokio lends the engine: a [`Timer`] on its clock, and a way to
//! give a permit back from a `Drop`. Shared by the server's doors and the tower layer.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

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
