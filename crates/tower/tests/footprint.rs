//! What every request allocates for the layer: its future stays under glibc's small-bin
//! limit (1,008 bytes of payload), so allocating it never consolidates the heap. At 1,424
//! bytes (two await points each holding the inner future, the timer inline) it did, on
//! every request, and the layer's overhead was twice what it is.

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use ratewarden_core::{Gcra, Rate};
use ratewarden_tower::{header, KeyedLimit, RateLimitLayer};
use tower::{Layer, Service};

#[test]
fn the_future_of_a_layered_axum_router_stays_under_a_kilobyte() {
    let limit = KeyedLimit::new("reads", Gcra::new(Rate::per_second(5).unwrap(), 5).unwrap())
        .key(|request| header(request, "x-user"));
    let layer = RateLimitLayer::builder().limit(limit).build().unwrap();
    let router: Router = Router::new().route("/", get(|| async { "hello" }));
    let mut service = layer.layer(router);
    let future =
        Service::<http::Request<Body>>::call(&mut service, http::Request::new(Body::empty()));
    let size = std::mem::size_of_val(&*future);
    assert!(size <= 1_008, "the service's future is {size} bytes");
}
