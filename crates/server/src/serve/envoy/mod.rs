//! Envoy's front doors: the global rate limit service over gRPC
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) and envoyproxy/ratelimit's
//! HTTP face (`POST /json`). Both only translate between their protocol and
//! [`Engine::decide_descriptors`](ratewarden_policy::Engine::decide_descriptors), which
//! decides exactly as HTTP requests are decided. Beside them, external authorization
//! (`envoy.service.auth.v3.Authorization/Check`, `authz`) decides the request itself, as
//! the gateway would. And Envoy's rate limit quota service (`rlqs`), which splits a rule's
//! rate among the Envoys that share it.

mod authz;
mod bound;
mod capped;
mod grpc;
mod json;
mod listen;
mod rlqs;

pub(crate) use json::handle as json;
pub(crate) use listen::serve;
