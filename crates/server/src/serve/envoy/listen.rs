//! The gRPC listener: Envoy's rate limit service and its external authorization, served on the work-stealing runtime
//! `workers::grpc` starts for it (each call a task, so one Envoy connection uses every core).

use std::sync::Arc;

use envoy_types::ext_authz::v3::pb::AuthorizationServer;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::sync::watch;

use super::authz::Authz;
use super::bound::NamedBound;
use super::capped::{handshakes, Capped};
use super::grpc::Rls;
use super::rlqs::Rlqs;
use crate::serve::app::App;
use crate::serve::conn::clients::Clients;

/// Envoy's rate limit service and `ext_authz` on the current runtime, until `stop`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    mut stop: watch::Receiver<bool>,
) {
    // Refused by the codec before it decodes: a message's bytes bound what decoding it
    // allocates (`NamedBound` names the setting in the refusal).
    let max = app.started().envoy.max_message_bytes;
    let open = app.started().envoy.clients.is_none() && app.engine.identity().trusted().is_empty();
    if open && listener.local_addr().is_ok_and(|a| !a.ip().is_loopback()) {
        tracing::warn!(
            "the gRPC listener answers ShouldRateLimit from anyone who reaches it: name the \
             Envoys in `[envoy] clients` (or `[server] trusted_proxies`)"
        );
    }
    let rls = RateLimitServiceServer::new(Rls {
        app: Arc::clone(&app),
    })
    .max_decoding_message_size(max);
    let clients = Arc::new(Clients::new(
        app.started().bounds.max_connections_per_client,
    ));
    let capped_app = Arc::clone(&app);
    let authz = AuthorizationServer::new(Authz { app }).max_decoding_message_size(max);
    let rlqs = RateLimitQuotaServiceServer::new(Rlqs::new(Arc::clone(&capped_app), stop.clone()))
        .max_decoding_message_size(max);
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    let served = tonic::transport::Server::builder()
        .layer(tower_layer::layer_fn(move |inner| NamedBound {
            inner,
            max,
        }))
        .add_service(rls)
        .add_service(authz)
        .add_service(rlqs);
    let capped = Capped {
        inner: tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        clients,
        app: Arc::clone(&capped_app),
    };
    let served = match capped_app.tls.grpc.clone() {
        Some(tls) => {
            served
                .serve_with_incoming_shutdown(handshakes(capped, tls), shutdown)
                .await
        }
        None => served.serve_with_incoming_shutdown(capped, shutdown).await,
    };
    if let Err(error) = served {
        tracing::error!(%error, "the gRPC listener failed");
    }
}
