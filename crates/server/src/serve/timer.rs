//! The timer the gateway lends the engine, so that a request an adaptive rule's queue holds
//! waits on tokio's timer while the engine reads the server's clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ratewarden_core::Clock;
use ratewarden_policy::Timer;

/// The server's clock, and tokio's timer for waits.
pub(crate) struct ClockTimer(pub(crate) Arc<dyn Clock>);

impl Timer for ClockTimer {
    fn now(&self) -> u64 {
        self.0.now()
    }

    fn sleep(&self, ns: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(Duration::from_nanos(ns)))
    }
}
