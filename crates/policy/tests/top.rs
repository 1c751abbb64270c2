//! Top offenders: the Space-Saving summary's stated error bound on a Zipf stream, its fixed
//! memory, no allocation on the hot path, and the engine feeding it per rule.

mod common;

use std::collections::HashMap;

use ratewarden_core::now_or_panic;
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::config::parse;
use ratewarden_policy::{api_key_digest, Engine, Request, TopKeys};

/// xorshift64: a fixed stream of numbers for a fixed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `n` draws from a Zipf distribution (exponent `s`) over `keys` keys, key 0 the heaviest.
fn zipf(keys: usize, s: f64, n: usize, seed: u64) -> Vec<usize> {
    let weights: Vec<f64> = (1..=keys).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let sum: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(keys);
    let mut running = 0.0;
    for w in &weights {
        running += w / sum;
        cdf.push(running);
    }
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (0..n)
        .map(|_| {
            let u = rng.below(1 << 53) as f64 / (1u64 << 53) as f64;
            cdf.partition_point(|&c| c < u).min(keys - 1)
        })
        .collect()
}

#[test]
fn on_a_zipf_stream_the_true_top_10_are_reported_within_the_stated_error() {
    for (s, seed) in [(1.1, 1), (0.9, 2), (1.5, 3)] {
        let stream = zipf(50_000, s, 200_000, seed);
        let top = TopKeys::new(100, u64::MAX);
        let mut truth: HashMap<usize, u64> = HashMap::new();
        for &k in &stream {
            top.record(&format!("client-{k}"), 0);
            *truth.entry(k).or_default() += 1;
        }
        let report = top.report(0);
        assert_eq!(report.total, stream.len() as f64);
        assert_eq!(report.error_bound, stream.len() as f64 / 100.0);
        // Every tracked count brackets the truth, with an error within the bound.
        for o in &report.keys {
            let k: usize = o.key["client-".len()..].parse().unwrap();
            let t = truth[&k] as f64;
            assert!(
                o.count - o.error <= t && t <= o.count,
                "s={s}: {o:?}, true {t}"
            );
            assert!(o.error <= report.error_bound, "s={s}: {o:?}");
        }
        let mut by_truth: Vec<(usize, u64)> = truth.into_iter().collect();
        by_truth.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        // The true top 10 are reported in the summary's top 10, unless a tie with the
        // 11th within the error makes the order ambiguous.
        let reported: Vec<&str> = report
            .keys
            .iter()
            .take(10)
            .map(|o| o.key.as_str())
            .collect();
        let eleventh = by_truth[10].1 as f64;
        if s > 1.0 {
            // Skewed enough that the bound separates the top 10 from the rest: exactly them.
            let mut want: Vec<String> = by_truth[..10]
                .iter()
                .map(|(k, _)| format!("client-{k}"))
                .collect();
            let mut got: Vec<String> = reported.iter().map(|k| (*k).to_owned()).collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "s={s}");
        }
        for (k, count) in &by_truth[..10] {
            let name = format!("client-{k}");
            let clear_winner = *count as f64 > eleventh + report.error_bound;
            assert!(
                reported.contains(&name.as_str()) || !clear_winner,
                "s={s}: true top key {name} ({count}) missing from {reported:?}"
            );
            if *count as f64 > report.error_bound {
                assert!(
                    report.keys.iter().any(|o| o.key == name),
                    "s={s}: {name} is heavier than total/capacity but untracked"
                );
            }
        }
    }
}

#[test]
fn memory_stays_fixed_whatever_the_stream() {
    let top = TopKeys::new(100, 60_000_000_000);
    let keys: Vec<String> = (0..5_000)
        .map(|i| format!("per-ip@0|198.51.{i}/32"))
        .collect();
    top.record(&keys[0], 0);
    let bytes = top.allocated_bytes();
    for round in 0..100u64 {
        for key in &keys[..50] {
            top.record(key, round);
        }
    }
    for (i, key) in keys.iter().enumerate() {
        top.record(key, 1_000 + i as u64);
    }
    assert_eq!(top.allocated_bytes(), bytes, "memory grew");
    assert!(top.report(10_000).keys.len() <= top.capacity());
}

fn request<'a>(peer: &str, headers: &'a [(&'a str, &'a str)]) -> Request<'a> {
    common::request(peer, "/orders", headers)
}

#[test]
fn the_engine_feeds_each_rules_limited_and_shadow_keys_with_api_keys_digested() {
    let config = parse(
        "t.toml",
        r#"
[[limit]]
name = "per-key"
key = ["api_key"]
algorithm = "fixed-window"
limit = 2
window = "1m"

[[limit]]
name = "per-ip-shadow"
key = ["ip"]
algorithm = "fixed-window"
limit = 1
window = "1m"
mode = "shadow"
"#,
    )
    .unwrap();
    let engine = Engine::new(config, MemoryStore::new(StoreConfig::default()));
    let now = 1_000_000_000_000;
    let send = |token: &str, ip: &str, n: usize| {
        let header = format!("Bearer {token}");
        let headers = [("authorization", header.as_str())];
        for _ in 0..n {
            now_or_panic(engine.decide(&request(ip, &headers), now)).unwrap();
        }
    };
    send("secret-alice", "203.0.113.1", 12); // 10 rejected
    send("secret-bob", "203.0.113.2", 5); // 3 rejected
    let top = engine.top("per-key", now).unwrap();
    let keys: Vec<(&str, f64)> = top
        .limited
        .keys
        .iter()
        .map(|o| (o.key.as_str(), o.count))
        .collect();
    let alice = api_key_digest("secret-alice");
    let bob = api_key_digest("secret-bob");
    assert_eq!(keys, [(alice.as_str(), 10.0), (bob.as_str(), 3.0)]);
    assert!(top.shadow.keys.is_empty());
    // The shadow rule is shown every request (and charged the allowed ones): alice's first
    // went through, her 11 others were over; bob's 4 others.
    let shadow = engine.top("per-ip-shadow", now).unwrap();
    let keys: Vec<(&str, f64)> = shadow
        .shadow
        .keys
        .iter()
        .map(|o| (o.key.as_str(), o.count))
        .collect();
    assert_eq!(keys, [("203.0.113.1/32", 11.0), ("203.0.113.2/32", 4.0)]);
    assert!(shadow.limited.keys.is_empty());
    // Decayed: two half-lives later a quarter is left.
    let later = engine.top("per-key", now + 120_000_000_000).unwrap();
    assert_eq!(later.limited.keys[0].count, 2.5);
    assert!(engine.top("no-such-rule", now).is_none());
    assert_eq!(engine.top_all(now).len(), 2);
}
