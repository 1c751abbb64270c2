//! The HTTP/1.1 codec under the lean paths, as hyper's `proto/h1` sits under its server and
//! client: request heads in ([`request`]) and out, response heads in ([`response`]) and out
//! ([`answer`], [`head`]), and body framing ([`body`], [`chunked`]).
//!
//! It knows nothing of the rules, the engine or the server: it reads and writes messages,
//! and what a lean path does with them (which to serve, which lines to forward) is the
//! path's. `tests/layout.rs` keeps it so: nothing here names `crate::serve` outside `h1`.

pub(crate) mod answer;
pub(crate) mod body;
pub(crate) mod chunked;
pub(crate) mod head;
pub(crate) mod request;
pub(crate) mod response;
#[cfg(test)]
mod tests;
