//! Connections: accept them (`listen`) for the door a listener serves (`door`), bound each client's count (`clients`) and the time
//! its head, body and writes may take (`idle`, `pacing`, `send`), serve the lean HTTP/1.1
//! paths' connections (`lean`), hand a connection to hyper (`rewind`) and stop them
//! gracefully (`graceful`).

pub(crate) mod clients;
mod door;
pub(crate) mod graceful;
mod idle;
pub(crate) mod lean;
mod listen;
pub(crate) mod pacing;
pub(crate) mod rewind;
pub(crate) mod send;
pub(crate) mod tls;
mod wire;

pub(crate) use door::Door;
pub(crate) use listen::{bind, serve};
pub(crate) use wire::Wire;
