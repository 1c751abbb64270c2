//! Ratewarden's shared store: the state of every key in Redis (one server, a Redis Cluster,
//! or a master behind Redis Sentinel), each decision one atomic script with the same
//! integer transition as the in-memory store.
//!
//! Redis runs Lua 5.1, whose numbers are doubles: exact only up to 2^53, while times in
//! nanoseconds since the epoch are near 2^61 and bucket ticks reach 2^128. A decision is
//! therefore computed in plain doubles when every number it touches stays below 2^52, times
//! kept as seconds and nanoseconds (`src/lua/fast.lua`, the common case), and otherwise on
//! fixed-width integers of 24-bit limbs (`src/lua/bigint.lua`), with the same results.
//! Numbers are sent as decimal strings.

mod breaker;
mod deadline;
mod encode;
mod slot;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use breaker::BreakerState;
pub use store::{RedisConfig, RedisError, RedisStore, SentinelTarget, Target, TimeSource};
