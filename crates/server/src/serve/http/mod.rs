//! The HTTP front doors: the gateway, the decision API (with forward-auth, `auth`) and the
//! admin listener, served by one accept loop (`listen`), with the gateway's upstream client
//! in a file of its own.

mod admin;
mod api;
mod auth;
mod check_json;
mod chunked;
pub(crate) mod clients;
mod dashboard;
mod decision_json;
mod gateway;
mod graceful;
mod guard;
mod idle;
mod lean;
mod lean_answer;
mod lean_conn;
mod lean_gateway;
mod lean_gateway_head;
mod lean_head;
mod lean_upstream;
mod limits;
mod listen;
mod operator;
mod overrides;
mod rewind;
mod send;
mod sent_body;
mod upstream;

pub(crate) use api::request_error_status;
pub(crate) use api::CheckBody;
pub(crate) use listen::{bind, serve, Role};
pub(crate) use upstream::Local;
