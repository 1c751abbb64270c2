//! The admin listener: `/metrics`, `/live`, `/ready`, and `POST /reload`.

use std::sync::Arc;

use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::app::App;
use super::reply::{self, Body};

pub(crate) async fn handle(app: &Arc<App>, request: Request<Incoming>) -> Response<Body> {
    let method = request.method().clone();
    match (&method, request.uri().path()) {
        (&Method::GET, "/metrics") => {
            app.metrics.in_flight.set(app.shedder.in_flight() as i64);
            let mut response = Response::new(reply::full(app.metrics.encode()));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        (&Method::GET, "/live") => reply::json(StatusCode::OK, &json!({ "status": "live" })),
        (&Method::GET, "/ready") => {
            if app.is_ready() {
                reply::json(
                    StatusCode::OK,
                    &json!({ "status": "ready", "config_version": app.engine.version() }),
                )
            } else {
                reply::problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: starting or shutting down",
                )
            }
        }
        (&Method::POST, "/reload") => match app.reload().await {
            Ok(version) => reply::json(
                StatusCode::OK,
                &json!({ "reloaded": true, "config_version": version }),
            ),
            Err(errors) => {
                let mut response = reply::problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("the config was not reloaded; the old rules stay in force:\n{errors}"),
                );
                if let Ok(errors) = serde_json::to_value(
                    errors.0.iter().map(ToString::to_string).collect::<Vec<_>>(),
                ) {
                    let body = json!({
                        "type": "about:blank",
                        "title": "Unprocessable Content",
                        "status": 422,
                        "detail": "the config was not reloaded; the old rules stay in force",
                        "errors": errors,
                        "config_version": app.engine.version(),
                    });
                    *response.body_mut() = reply::full(body.to_string());
                }
                response
            }
        },
        (_, "/metrics" | "/live" | "/ready") => {
            reply::problem(StatusCode::METHOD_NOT_ALLOWED, "this endpoint takes GET")
        }
        (_, "/reload") => {
            reply::problem(StatusCode::METHOD_NOT_ALLOWED, "`/reload` takes POST")
        }
        (_, path) => reply::problem(
            StatusCode::NOT_FOUND,
            format!("no such endpoint `{path}`; the admin listener has /metrics, /live, /ready and POST /reload"),
        ),
    }
}
