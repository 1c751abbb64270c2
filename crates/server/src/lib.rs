//! The `ratewarden` binary's library: everything testable lives here, `main.rs` only parses
//! arguments and dispatches.

pub mod check_config;
pub mod cli;
pub mod describe;
pub mod explain;
pub mod run;
pub mod serve;
