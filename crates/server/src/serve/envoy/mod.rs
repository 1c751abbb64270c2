//! Envoy's front doors on the gRPC listener: the global rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), which, like
//! envoyproxy/ratelimit's HTTP face (`POST /json`, on the decision API), runs `serve::rls`.
//! Both only translate between their protocol and
//! [`Engine::decide_descriptors`](ratewarden_policy::Engine::decide_descriptors), which
//! decides exactly as HTTP requests are decided. Beside them, external authorization
//! (`envoy.service.auth.v3.Authorization/Check`, `authz`) decides the request itself, as
//! the gateway would. And Envoy's rate limit quota service (`rlqs`), which splits a rule's
//! rate among the Envoys that share it.

mod authz;
mod bound;
mod capped;
mod grpc;
mod listen;
mod rlqs;

pub(crate) use listen::serve;

/// Refuses a gRPC call to `method` from a peer outside `[envoy] clients` (or, when that is
/// not set, `[server] trusted_proxies`), logging it: its `PERMISSION_DENIED`, naming the
/// peer and the list.
fn only_our_envoys(
    app: &crate::serve::app::App,
    peer: Option<std::net::IpAddr>,
    method: &str,
) -> Result<(), tonic::Status> {
    let settings = app.settings();
    if settings.envoy.admits(app.engine.identity().trusted(), peer) {
        return Ok(());
    }
    let who = peer.map_or_else(|| "an unknown peer".to_owned(), |ip| ip.to_string());
    let list = if settings.envoy.clients.is_some() {
        "`[envoy] clients`"
    } else {
        "`[server] trusted_proxies`, which stands for `[envoy] clients` when that is not set"
    };
    app.log_untrusted(&who, method, list);
    Err(tonic::Status::permission_denied(format!(
        "{who} may not call {method}: it is not in {list}"
    )))
}
