//! `ShouldRateLimit` over gRPC: the caller checked, then the request decided as `serve::rls`
//! decides it.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::serve::app::App;
use crate::serve::rls::{decide, Refusal};

/// The service, over the server's engine.
pub(crate) struct Rls {
    pub(crate) app: Arc<App>,
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // A call charges whatever descriptors it names: only our Envoys may make one.
        super::only_our_envoys(
            &self.app,
            request.remote_addr().map(|a| a.ip()),
            "ShouldRateLimit",
        )?;
        let settings = self.app.settings();
        let request = request.into_inner();
        decide(&self.app, &settings, &request)
            .await
            .map(Response::new)
            .map_err(Refusal::status)
    }
}
