//! The timer a layer lends the engine: a request an adaptive rule's queue holds waits on
//! tokio's timer while the engine reads the layer's clock (`TokioClock` under paused time).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ratewarden_core::Clock;
use ratewarden_policy::Timer;

/// The layer's clock, and tokio's timer for waits.
pub(crate) struct ClockTimer<'a>(pub(crate) &'a dyn Clock);

impl Timer for ClockTimer<'_> {
    fn now(&self) -> u64 {
        self.0.now()
    }

    fn sleep(&self, ns: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(Duration::from_nanos(ns)))
    }
}
