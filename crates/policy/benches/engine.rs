//! What the policy engine adds to the store: one request decided through the example API's
//! three layers (per-IP sliding window, per-API-key GCRA, monthly quota) by
//! [`Engine::decide`], beside the same three limits decided directly on the store with
//! pre-built keys ([`MemoryStore::decide_all`], the floor: the engine cannot do less).
//!
//! The difference is matching the rules, finding the client address, building and hashing the
//! keys (the API key digested), and the verdict. Run with
//! `cargo bench -p ratewarden-policy --bench engine`; both cases are in one group, so their
//! ratio comes from one run.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

use criterion::Criterion;
use ratewarden_core::{now_or_panic, Clock, Limit, RealClock};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::config::parse;
use ratewarden_policy::{Engine, Request};

const CONFIG: &str = r#"
[[limit]]
name = "per-ip"
key = ["ip"]
algorithm = "sliding-window"
limit = 1_000_000_000
window = "1m"

[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "gcra"
rate = "1000000000/s"
burst = 1_000_000_000

[[limit]]
name = "monthly"
key = ["api_key"]
algorithm = "quota"
limit = 1_000_000_000_000
period = "month"
timezone = "UTC"
"#;

/// Distinct clients: enough that keys spread over the shards, few enough to stay cached.
const CLIENTS: usize = 1024;

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args();
    let clock = RealClock::new();
    let config = parse("bench.toml", CONFIG).expect("the bench config is valid");
    let limits: Vec<Limit> = config.rules.iter().map(|r| r.limit.clone()).collect();
    let engine = Engine::new(config, MemoryStore::new(StoreConfig::default()));
    let store: MemoryStore = MemoryStore::new(StoreConfig::default());

    let peers: Vec<IpAddr> = (0..CLIENTS)
        .map(|i| IpAddr::from([203, 0, (i >> 8) as u8, i as u8]))
        .collect();
    let tokens: Vec<String> = (0..CLIENTS).map(|i| format!("Bearer key-{i:08}")).collect();
    let keys: Vec<[String; 3]> = (0..CLIENTS)
        .map(|i| {
            [
                format!("per-ip@0|{}/32", peers[i]),
                format!("per-key@0|key:{i:016x}"),
                format!("monthly@0|key:{i:016x}"),
            ]
        })
        .collect();

    let mut group = criterion.benchmark_group("three layers");
    let mut i = 0usize;
    group.bench_function("engine decide", |b| {
        b.iter(|| {
            i = (i + 1) % CLIENTS;
            let headers = [("authorization", tokens[i].as_str())];
            let request = Request {
                peer: peers[i],
                method: "GET",
                path: "/orders",
                host: Some("api.example.com"),
                headers: &headers,
                cost: None,
                api_key: None,
                tenant: None,
            };
            black_box(now_or_panic(engine.decide(&request, clock.now())).map(|v| v.allowed))
        })
    });
    let mut i = 0usize;
    group.bench_function("store decide_all (floor)", |b| {
        b.iter(|| {
            i = (i + 1) % CLIENTS;
            let layers: [(&Limit, &str, u64); 3] = [
                (&limits[0], &keys[i][0], 1),
                (&limits[1], &keys[i][1], 1),
                (&limits[2], &keys[i][2], 1),
            ];
            black_box(store.decide_all(&layers, clock.now()).len())
        })
    });
    group.finish();
    criterion.final_summary();
}
