//! One keyed limiter deciding on many keys, alone in its process: the program to profile
//! (the bench runs three limiters in one process, so a profile of it mixes them).
//!
//! ```sh
//! cargo build --release -p ratewarden-memory --example keyed_profile
//! valgrind --tool=cachegrind --cache-sim=yes target/release/examples/keyed_profile ours 1000000 2000000
//! valgrind --tool=cachegrind --cache-sim=yes target/release/examples/keyed_profile governor 1000000 2000000
//! ```
//!
//! Arguments: the limiter (`ours`, `ours-check` (`MemoryStore::check`), `ours-batch` or
//! `governor`), the number of keys, the
//! number of decisions timed after every key has been decided once (the profile counts
//! both: subtract a run with zero decisions to isolate them), and optionally the quota:
//! `live` (the default: 1 per minute, burst 100 million, every decision allowed) or `flood`
//! (1 per second, burst 100: past each key's first hundred, nearly every decision is
//! rejected, as in the bench's flood, however slowly valgrind runs).

use std::error::Error;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ratewarden_core::{Clock, Gcra, Rate, RealClock};
use ratewarden_memory::{MemoryStore, StoreConfig};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (which, keys, decisions, quota) = match args.as_slice() {
        [which, keys, decisions] => (which, keys, decisions, "live"),
        [which, keys, decisions, quota] => (which, keys, decisions, quota.as_str()),
        _ => return Err(
            "usage: keyed_profile ours|ours-check|ours-batch|governor KEYS DECISIONS [live|flood]"
                .into(),
        ),
    };
    // The flood's keys are decided past their burst before the timed decisions.
    let (per, burst, warm) = match quota {
        "live" => (Duration::from_secs(60), 100_000_000, 1),
        "flood" => (Duration::from_secs(1), 100, 101),
        other => return Err(format!("unknown quota {other:?}: live or flood").into()),
    };
    let n: usize = keys.parse().map_err(|e| format!("KEYS {keys:?}: {e}"))?;
    let decisions: usize = decisions
        .parse()
        .map_err(|e| format!("DECISIONS {decisions:?}: {e}"))?;
    let keys: Vec<String> = (0..n).map(|i| format!("key-{i:07}")).collect();
    // A fixed shuffle (multiplying by an odd constant modulo a power of two would repeat
    // cache lines; this walks every key once per pass in a scattered order).
    let order: Vec<usize> = (0..decisions)
        .map(|i| (i.wrapping_mul(0x9e37_79b9) ^ (i >> 7)) % n)
        .collect();
    let clock = RealClock::new();
    let gcra = Gcra::new(Rate::new(1, per)?, burst)?;
    let mut allowed = 0usize;
    match which.as_str() {
        "ours" | "ours-check" | "ours-batch" => {
            let store: MemoryStore<Gcra> = MemoryStore::new(StoreConfig {
                max_keys: 2 * n + 1024,
                max_bytes: usize::MAX,
                ..StoreConfig::default()
            });
            for _ in 0..warm {
                for key in &keys {
                    store.decide(&gcra, key, clock.now(), 1);
                }
            }
            if which == "ours" {
                for &i in &order {
                    allowed +=
                        usize::from(store.decide(&gcra, &keys[i], clock.now(), 1).is_allowed());
                }
            } else if which == "ours-check" {
                for &i in &order {
                    allowed += usize::from(store.check(&gcra, &keys[i], clock.now(), 1).is_ok());
                }
            } else {
                let mut out = Vec::with_capacity(16);
                for chunk in order.chunks(16) {
                    let batch: Vec<&str> = chunk.iter().map(|&i| keys[i].as_str()).collect();
                    out.clear();
                    store.decide_many(&gcra, &batch, clock.now(), 1, &mut out);
                    allowed += out.iter().filter(|d| d.is_allowed()).count();
                }
            }
        }
        "governor" => {
            let quota = Quota::with_period(per)
                .ok_or("zero period")?
                .allow_burst(NonZeroU32::new(burst as u32).ok_or("zero burst")?);
            let limiter: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota);
            for _ in 0..warm {
                for key in &keys {
                    let _ = limiter.check_key(key);
                }
            }
            for &i in &order {
                allowed += usize::from(limiter.check_key(&keys[i]).is_ok());
            }
        }
        other => {
            return Err(format!(
                "unknown limiter {other:?}: ours, ours-check, ours-batch or governor"
            )
            .into())
        }
    }
    println!("{which}: {n} keys, {allowed} of {decisions} decisions allowed");
    Ok(())
}
