//! `ratewarden serve`: the decision API, the gateway and the admin listener.
//!
//! [`start()`] binds every listener of a config and serves until [`Running::shutdown`] (or a
//! signal, under the `serve` command in `crate::run`); tests start it in-process on
//! `127.0.0.1:0` with a clock of their own.
//!
//! The map (`docs/architecture.md`, "The server"): `start` builds the store (`store`) and
//! the engine and binds the listeners, the first worker serving them on the caller's
//! runtime and `workers` the rest; `conn` accepts and times connections; the front doors
//! (`gateway`, `api`, `envoy`) parse what they are asked and hand it to `admission`, the one
//! pipeline to the engine, then render its answer (`reply`, `h1` for the lean paths' bytes);
//! `app` is what every listener shares; `admin` and `metrics` show what the rules did;
//! `running` is the handle `start` returns. The command around it (arguments, logs,
//! signals) is `crate::run`, above: nothing here imports the command-line files.

mod admin;
mod admission;
mod api;
mod app;
mod bodies;
mod conn;
mod envoy;
mod gateway;
mod guard;
mod h1;
mod metrics;
mod operator;
mod prefetch;
mod reply;
mod rls;
mod running;
mod shed;
mod start;
pub(crate) mod store;
mod throttle;
mod workers;

pub(crate) use bodies::CheckBody;
/// Moved to core, beside the other clocks; this path stays.
pub use ratewarden_core::TokioClock;
pub use running::Running;
pub use start::{start, Options};

/// Reads every certificate, key and CA the `[tls.*]` sections name, as `serve` does at
/// start (for `check-config`).
///
/// # Errors
///
/// Each file that cannot be read or used, at the config line naming it.
pub(crate) fn check_tls(
    files: &ratewarden_policy::config::TlsListeners,
) -> Result<(), ratewarden_policy::ConfigErrors> {
    conn::tls::Listeners::new(files).map(drop)
}
