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
use ratewarden_policy::{envoy, Engine, Request, RequestDescriptor, TopKeys};

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

/// One request a day per key, enforced and in shadow: after the first, every request is
/// rejected and would have been.
const LIMITED: &str = r#"
[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "fixed-window"
limit = 1
window = "1d"

[[limit]]
name = "per-ip-shadow"
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1d"
mode = "shadow"
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
                body: None,
                client_cert: None,
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

    // The path the top-offenders summary is fed on: every request over its limit, one
    // enforced rule rejecting and one shadow rule that would have.
    let limited = Engine::new(
        parse("bench.toml", LIMITED).expect("the limited bench config is valid"),
        MemoryStore::new(StoreConfig::default()),
    );
    let mut group = criterion.benchmark_group("limited");
    let mut i = 0usize;
    group.bench_function("engine decide, rejected", |b| {
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
                body: None,
                client_cert: None,
            };
            black_box(now_or_panic(limited.decide(&request, clock.now())).map(|v| v.allowed))
        })
    });
    // What feeding the top offenders adds to a rejected decision (twice per decision here:
    // the enforced rule's summary and the shadow rule's), in the same run.
    let top = TopKeys::default();
    let ids: Vec<String> = keys.iter().map(|k| k[1].clone()).collect();
    for id in &ids[..50] {
        top.record(id, 0);
    }
    let mut i = 0usize;
    group.bench_function("top record, tracked key", |b| {
        b.iter(|| {
            i = (i + 1) % 50;
            top.record(black_box(&ids[i]), 0);
        })
    });
    let mut i = 0usize;
    group.bench_function("top record, untracked key (a slot taken over)", |b| {
        b.iter(|| {
            i = (i + 1) % CLIENTS;
            top.record(black_box(&ids[i]), 0);
        })
    });
    group.finish();

    // Envoy's path: one descriptor of `scripts/bench-rls`'s YAML rule per call, resolved,
    // keyed and decided, beside the store deciding the same fixed window on the key the
    // engine builds (the floor).
    let yaml = envoy::parse("bench.yaml", ENVOY).expect("the bench YAML is valid");
    let described = Engine::with_envoy(
        parse("bench.toml", "").expect("an empty config is valid"),
        yaml,
        MemoryStore::new(StoreConfig::default()),
    );
    let ids: Vec<String> = (0..CLIENTS).map(|i| format!("client-{i:06}")).collect();
    let first = RequestDescriptor {
        entries: vec![("client_id", ids[0].as_str())],
        hits: None,
        limit: None,
    };
    let verdict = now_or_panic(described.decide_descriptors("bench", &[first], 1, clock.now()))
        .expect("the bench descriptor is decided");
    let limit = verdict.rules[0].limit.clone();
    let envoy_keys: Vec<String> = ids
        .iter()
        .map(|id| verdict.outcomes[0].key.replace(ids[0].as_str(), id))
        .collect();
    let mut group = criterion.benchmark_group("envoy descriptors");
    let mut i = 0usize;
    group.bench_function("engine decide_descriptors", |b| {
        b.iter(|| {
            i = (i + 1) % CLIENTS;
            let descriptor = RequestDescriptor {
                entries: vec![("client_id", ids[i].as_str())],
                hits: None,
                limit: None,
            };
            black_box(
                now_or_panic(described.decide_descriptors("bench", &[descriptor], 1, clock.now()))
                    .map(|v| v.allowed),
            )
        })
    });
    let mut i = 0usize;
    group.bench_function("store decide_all (floor)", |b| {
        b.iter(|| {
            i = (i + 1) % CLIENTS;
            let layers: [(&Limit, &str, u64); 1] = [(&limit, &envoy_keys[i], 1)];
            black_box(store.decide_all(&layers, clock.now()).len())
        })
    });
    group.finish();

    // Envoy's path through native rules: a descriptor taken by the last of nine rules of its
    // domain. The eight before it refuse it: descriptor rules of another entry (a domain
    // and an entry compared each), or quota bucket rules (one check each).
    let mut group = criterion.benchmark_group("native descriptors");
    let ahead = |matches: &str| -> String {
        let mut toml = String::new();
        for n in 0..8 {
            toml.push_str(&format!(
                "[[limit]]\nname = \"ahead-{n}\"\nmatch = {{ domain = \"bench\", {matches} }}\nkey = [\"global\"]\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1\n"
            ));
        }
        toml.push_str("[[limit]]\nname = \"taker\"\nmatch = { domain = \"bench\", descriptor = \"client_id\" }\nkey = [\"descriptor\"]\nalgorithm = \"fixed-window\"\nlimit = 1_000_000_000\nwindow = \"1s\"\n");
        toml
    };
    let cases = [
        ("behind 8 descriptor rules", ahead("descriptor = \"other\"")),
        ("behind 8 bucket rules", ahead("bucket = \"name=api\"")),
    ];
    for (name, toml) in cases {
        let native = Engine::new(
            parse("bench.toml", &toml).expect("the bench config is valid"),
            MemoryStore::new(StoreConfig::default()),
        );
        let mut i = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % CLIENTS;
                let descriptor = RequestDescriptor {
                    entries: vec![("client_id", ids[i].as_str())],
                    hits: None,
                    limit: None,
                };
                black_box(
                    now_or_panic(native.decide_descriptors("bench", &[descriptor], 1, clock.now()))
                        .map(|v| v.allowed),
                )
            })
        });
    }
    group.finish();
    criterion.final_summary();
}

/// `scripts/bench-rls`'s rule: a limit so high that nothing is refused.
const ENVOY: &str = r#"
domain: bench
descriptors:
  - key: client_id
    rate_limit: {unit: second, requests_per_unit: 1000000000}
"#;
