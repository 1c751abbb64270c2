//! `ratewarden serve`: the decision API, the gateway and the admin listener.
//!
//! [`start()`] binds every listener of a config and serves until [`Running::shutdown`] (or a
//! signal, under [`main`]); tests start it in-process on `127.0.0.1:0` with a clock of
//! their own.
//!
//! The map: `start` builds the store (`store`) and the engine and binds the listeners, the
//! first worker serving them on the caller's runtime and `workers` the rest; `http` and
//! `envoy` are the front doors, `app` what they share (`forwarded`: what the forward-auth
//! doors of both share); `running` is the handle `start`
//! returns; `run` and `signals` are the command around it.

mod app;
mod envoy;
mod forwarded;
mod http;
mod logs;
mod metrics;
mod metrics_adaptive;
mod operator;
mod prefetch;
mod reply;
mod run;
mod running;
mod shed;
mod signals;
mod start;
mod store;
mod throttle;
mod timer;
mod workers;

pub(crate) use http::CheckBody;
/// Moved to core, beside the other clocks; this path stays.
pub use ratewarden_core::TokioClock;
pub use run::main;
pub use running::Running;
pub use start::{start, Options};
