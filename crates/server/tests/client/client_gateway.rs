//! Both clients (tower layer, reqwest middleware) against `ratewarden serve` over real
//! sockets, on paused time: Retry-After in both forms, both header generations, a 503,
//! POST without a key, the deadline over all attempts.

#[path = "../client_common/mod.rs"]
mod client_common;

use std::time::Duration;

use bytes::Bytes;
use client_common::*;
use http::{Method, StatusCode};
use http_body_util::Full;
use ratewarden_client::{Backoff, RetryBudget, RetryMiddleware, Settings};
use tokio::time::Instant;

const PER_IP_2_PER_10S: &str = r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "fixed-window"
limit = 2
window = "10s"
"#;

fn no_pacing() -> Settings {
    Settings {
        pacing: false,
        backoff: Backoff::full_jitter(Duration::from_millis(10), Duration::from_millis(100)),
        ..Settings::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_from_the_gateway_is_retried_after_its_delta_retry_after() {
    for via in BOTH {
        let clock = clock();
        let up = upstream(clock.clone()).await;
        let gw = gateway(&up, "", PER_IP_2_PER_10S, clock.clone()).await;
        let p = policy(no_pacing(), &clock);
        let url = format!("http://{}/ok", gw.listen);
        for _ in 0..2 {
            assert_eq!(
                send(via, &p, Method::GET, &url, &[]).await.unwrap().0,
                StatusCode::OK
            );
        }
        let start = Instant::now();
        let (status, _) = send(via, &p, Method::GET, &url, &[]).await.unwrap();
        assert_eq!(
            status,
            StatusCode::OK,
            "{via:?}: retried once the window reset"
        );
        let waited = start.elapsed();
        assert!(waited >= Duration::from_secs(10), "{via:?}: {waited:?}");
        assert!(waited < Duration::from_secs(11), "{via:?}: {waited:?}");
        assert_eq!(p.stats().retries, 1, "{via:?}");
        assert_eq!(
            up.seen("/ok"),
            3,
            "{via:?}: the 429 never reached the upstream"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_ratelimit_fields_pace_the_client_before_it_is_refused() {
    for via in BOTH {
        let clock = clock();
        let up = upstream(clock.clone()).await;
        let gw = gateway(&up, "", PER_IP_2_PER_10S, clock.clone()).await;
        let p = policy(Settings::default(), &clock);
        let url = format!("http://{}/ok", gw.listen);
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(
                send(via, &p, Method::GET, &url, &[]).await.unwrap().0,
                StatusCode::OK
            );
        }
        // The second answer said r=0;t=10: the third waited instead of drawing a 429.
        assert!(start.elapsed() >= Duration::from_secs(10), "{via:?}");
        assert_eq!(p.stats().retries, 0, "{via:?}: never refused");
        assert_eq!(p.stats().paced, 2, "{via:?}: {:?}", p.stats());
        let origin = format!("http://{}", gw.listen);
        let quota = p
            .quota(&origin, Some("per-ip"))
            .expect("the draft fields were read");
        assert_eq!(
            (quota.limit, quota.window),
            (Some(2), Some(Duration::from_secs(10)))
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_legacy_fields_are_read_too() {
    for via in BOTH {
        let clock = clock();
        let up = upstream(clock.clone()).await;
        let gw = gateway(
            &up,
            "legacy_headers = true",
            PER_IP_2_PER_10S,
            clock.clone(),
        )
        .await;
        let p = policy(Settings::default(), &clock);
        let url = format!("http://{}/ok", gw.listen);
        let (_, headers) = send(via, &p, Method::GET, &url, &[]).await.unwrap();
        assert_eq!(headers["x-ratelimit-remaining"], "1");
        // Drop the draft fields to see the legacy ones alone do the work.
        let mut legacy = headers.clone();
        legacy.remove("ratelimit");
        legacy.remove("ratelimit-policy");
        let quotas = ratewarden_client::quotas(&legacy, clock.now()).unwrap();
        assert_eq!(quotas[0].policy, None);
        assert_eq!((quotas[0].remaining, quotas[0].limit), (1, Some(2)));
        assert_eq!(quotas[0].reset, Duration::from_secs(10));
    }
}

#[tokio::test(start_paused = true)]
async fn a_503_with_retry_after_in_either_form_is_waited_out() {
    for via in BOTH {
        for (path, at_least) in [("/busy", 2), ("/busy-date", 3)] {
            let clock = clock();
            let up = upstream(clock.clone()).await;
            let gw = gateway(&up, "", "", clock.clone()).await;
            let p = policy(no_pacing(), &clock);
            let start = Instant::now();
            let url = format!("http://{}{path}", gw.listen);
            let (status, _) = send(via, &p, Method::GET, &url, &[]).await.unwrap();
            assert_eq!(status, StatusCode::OK, "{via:?} {path}");
            let waited = start.elapsed();
            assert!(
                waited >= Duration::from_secs(at_least),
                "{via:?} {path}: {waited:?}"
            );
            assert!(
                waited < Duration::from_secs(at_least + 1),
                "{via:?} {path}: {waited:?}"
            );
            assert_eq!(up.seen(path), 2, "{via:?} {path}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_is_never_retried_without_an_idempotency_key() {
    for via in BOTH {
        let clock = clock();
        let up = upstream(clock.clone()).await;
        let gw = gateway(&up, "", "", clock.clone()).await;
        let p = policy(no_pacing(), &clock);
        let url = format!("http://{}/busy", gw.listen);
        let (status, _) = send(via, &p, Method::POST, &url, &[]).await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{via:?}");
        assert_eq!(up.seen("/busy"), 1, "{via:?}");
        assert_eq!(p.stats().not_repeatable, 1, "{via:?}");

        let up = upstream(clock.clone()).await;
        let gw = gateway(&up, "", "", clock.clone()).await;
        let url = format!("http://{}/busy", gw.listen);
        let keyed = [("idempotency-key", "order-17")];
        let (status, _) = send(via, &p, Method::POST, &url, &keyed).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{via:?}: with a key it is retried");
        assert_eq!(up.seen("/busy"), 2, "{via:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_deadline_spans_every_attempt_and_wait() {
    for via in BOTH {
        let clock = clock();
        let up = upstream(clock.clone()).await;
        let gw = gateway(&up, "", "", clock.clone()).await;
        let settings = Settings {
            max_attempts: 100,
            deadline: Some(Duration::from_millis(3500)),
            ..no_pacing()
        };
        let p = policy(settings.clone(), &clock);
        let start = Instant::now();
        let url = format!("http://{}/down", gw.listen);
        let (status, _) = send(via, &p, Method::GET, &url, &[]).await.unwrap();
        // Attempts at 0, 1, 2 and 3 s (Retry-After: 1); a fifth would start at 4 s.
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{via:?}");
        assert_eq!(up.seen("/down"), 4, "{via:?}");
        assert!(start.elapsed() < Duration::from_millis(3500), "{via:?}");
        assert_eq!(p.stats().deadline_give_ups, 1, "{via:?}");

        // An attempt in flight is cut off at the deadline.
        let p = policy(settings, &clock);
        let start = Instant::now();
        let url = format!("http://{}/hang", gw.listen);
        let e = send(via, &p, Method::GET, &url, &[]).await.unwrap_err();
        assert!(e.contains("deadline of 3.5s"), "{via:?}: {e}");
        assert_eq!(start.elapsed(), Duration::from_millis(3500), "{via:?}");
    }
}

/// Requests dropped while their attempt is in flight leave nothing in the policy's watch
/// over deadlines (`watchdog.rs`: its own test drops 10,000).
#[tokio::test(start_paused = true)]
async fn requests_dropped_in_flight_leave_no_deadline_watched() {
    for via in BOTH {
        let clock = clock();
        let up = upstream(clock.clone()).await;
        let gw = gateway(&up, "", "", clock.clone()).await;
        let p = policy(no_pacing(), &clock);
        let url = format!("http://{}/hang", gw.listen);
        let requests: Vec<_> = (0..100)
            .map(|_| {
                let (p, url) = (p.clone(), url.clone());
                tokio::spawn(async move { send(via, &p, Method::GET, &url, &[]).await })
            })
            .collect();
        // Paused time stands still while this task keeps the runtime busy.
        while p.watched_attempts() < 100 {
            tokio::task::yield_now().await;
        }
        requests.iter().for_each(|r| r.abort());
        for r in requests {
            assert!(r.await.unwrap_err().is_cancelled(), "{via:?}");
        }
        assert_eq!(p.watched_attempts(), 0, "{via:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_and_then_reported() {
    for via in BOTH {
        let clock = clock();
        // A port nothing listens on.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let p = policy(no_pacing(), &clock);
        let url = format!("http://{closed}/ok");
        let e = send(via, &p, Method::GET, &url, &[]).await.unwrap_err();
        assert_eq!(p.stats().attempts, 4, "{via:?}: {e}");
        assert_eq!(p.stats().retries, 3, "{via:?}");
    }
}

#[allow(dead_code)]
#[path = "../../examples/hammer.rs"]
mod hammer;

#[tokio::test(start_paused = true)]
async fn fifty_requests_through_a_5_per_second_gateway_draw_at_most_one_429() {
    let clock = clock();
    let gw = hammer::gateway(hammer::upstream().await, clock.clone()).await;
    let p = policy(Settings::default(), &clock);
    let start = Instant::now();
    let tally = hammer::hammer(&format!("http://{}/orders", gw.listen), &p, 50).await;
    assert_eq!((tally.ok, tally.other), (50, 0));
    assert!(tally.stats.refused_answers <= 1, "{:?}", tally.stats);
    // Paced, not rushed: 5 at once then 5 a second would be 9 s; the client is a little
    // more careful than that, never slower than 4 a second.
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(9), "{took:?}");
    assert!(took <= Duration::from_millis(12_500), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn clones_of_the_tower_service_share_one_budget() {
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use ratewarden_client::tower::RetryLayer;
    use ratewarden_client::RetryBudget;
    use tower_layer::Layer;
    use tower_service::Service;

    let clock = clock();
    let up = upstream(clock.clone()).await;
    let gw = gateway(&up, "", "", clock.clone()).await;
    // A budget of exactly one retry (1 a second over 1 s, nothing earned by requests).
    let settings = Settings {
        budget: Some(RetryBudget::new(Duration::from_secs(1), 1, 0.0)),
        ..no_pacing()
    };
    let p = policy(settings, &clock);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let service = RetryLayer::new(p.clone()).layer(client);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        // A clone per request, as axum and tonic make them.
        let mut clone = service.clone();
        let request = http::Request::get(format!("http://{}/flaky", gw.listen))
            .body(Full::new(Bytes::new()))
            .unwrap();
        std::future::poll_fn(|cx| clone.poll_ready(cx))
            .await
            .unwrap();
        statuses.push(clone.call(request).await.unwrap().status());
    }
    assert_eq!(statuses, [StatusCode::SERVICE_UNAVAILABLE; 3]);
    let stats = p.stats();
    assert_eq!((stats.requests, stats.retries), (3, 1), "{stats:?}");
    // The first request's second retry, and the other two clones' first ones.
    assert_eq!(stats.budget_refusals, 3, "the clones drew on one budget");
    assert_eq!(up.seen("/flaky"), 4);
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_sent_once_spends_no_retry_budget() {
    // A streamed body cannot be copied, so the request goes once; answered 503 it was
    // still charged a retry from the budget, which it never made.
    let clock = clock();
    let up = upstream(clock.clone()).await;
    let gw = gateway(&up, "", "", clock.clone()).await;
    let one_retry = Settings {
        budget: Some(RetryBudget::new(Duration::from_secs(1), 1, 0.0)),
        ..no_pacing()
    };
    let p = policy(one_retry, &clock);
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(p.clone()))
        .build();
    let streamed = reqwest::Body::wrap(Full::new(Bytes::from_static(b"order 17")));
    let response = client
        .post(format!("http://{}/busy", gw.listen))
        .header("idempotency-key", "order-17")
        .body(streamed)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(up.seen("/busy"), 1);
    assert_eq!(p.stats().not_repeatable, 1);
    // The budget's one retry is still there for a request that can be sent again.
    let url = format!("http://{}/busy-date", gw.listen);
    let (status, _) = send(Via::Reqwest, &p, Method::GET, &url, &[])
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(p.stats().budget_refusals, 0);
    assert_eq!(up.seen("/busy-date"), 2);
}
