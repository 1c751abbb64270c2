//! Two tenants through one concurrency limit with a fair queue in front: one offers ten
//! times its fair share, the other half of it. The light tenant gets every request it sends
//! and its p99 stays within 1.25× of its p99 alone. Simulated event by event, exactly.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use ratewarden_core::adaptive::{
    AdaptiveLimiter, AimdConfig, Completion, Criticality, FairQueue, FairQueueConfig, Strategy,
    Ticket, WindowConfig,
};

const MS: u64 = 1_000_000;
const WORKERS: u64 = 32;
/// The mean service time; each request takes from half of it to one and a half times it
/// (spread by a fixed sequence: equal times would make every worker finish together, and
/// the queue would be served in bursts).
const SERVICE: u64 = 100 * MS;
/// Answers a second: 320.
const CAPACITY: u64 = WORKERS * 1_000 * MS / SERVICE;

/// A request being served: when it is done, its ticket's token and expiry, whether it is
/// the light tenant's, and when it arrived.
type Serving = (u64, u64, u64, bool, u64);

/// What the light tenant saw.
#[derive(Debug)]
struct Light {
    sent: usize,
    served: usize,
    /// Waited past the max wait, or found its hand full.
    dropped: usize,
    p99: u64,
}

/// FNV-1a of a tenant's key: the flow's hash its hand is dealt from.
fn flow(tenant: &str) -> u64 {
    tenant.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Ten seconds of `heavy` and `light` arrivals a second (evenly spaced), through a limit
/// pinned at the upstream's workers and a fair queue with a hand of `hand`.
fn run(heavy: u64, light: u64, hand: u32) -> Light {
    let strategy = Strategy::Aimd(AimdConfig {
        initial: WORKERS,
        min: WORKERS,
        max: WORKERS,
        ..AimdConfig::default()
    });
    let mut limiter =
        AdaptiveLimiter::new(strategy.build(WindowConfig::default(), 0, 1), 0, u64::MAX);
    let mut queue: FairQueue<(bool, u64)> = FairQueue::new(FairQueueConfig {
        hand,
        max_wait_ns: 1_000 * MS,
        ..FairQueueConfig::default()
    })
    .unwrap();
    let end = 10_000 * MS;
    let mut arrivals: Vec<(u64, bool)> = Vec::new();
    for (rate, is_light) in [(heavy, false), (light, true)] {
        arrivals.extend((0..rate * 10).map(|i| (i * 1_000 * MS / rate, is_light)));
    }
    arrivals.sort();
    let mut busy: BinaryHeap<Reverse<Serving>> = BinaryHeap::new();
    let mut light_latencies = Vec::new();
    let mut light_sent = 0;
    let mut spread = 0x9E37_79B9_7F4A_7C15u64;
    let mut start =
        |busy: &mut BinaryHeap<_>, t: Ticket, now: u64, is_light: bool, arrived: u64| {
            spread = spread
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let took = SERVICE / 2 + (spread >> 11) % SERVICE;
            busy.push(Reverse((now + took, t.token, t.expires, is_light, arrived)));
        };
    let mut dropped = 0;
    let mut next = arrivals.into_iter().peekable();
    loop {
        let done = busy.peek().map(|Reverse(b)| b.0);
        let arrival = next.peek().map(|a| a.0);
        let now = match (done, arrival) {
            (Some(d), Some(a)) => d.min(a),
            (Some(d), None) => d,
            (None, Some(a)) => a,
            (None, None) => break,
        };
        if now >= end {
            break;
        }
        dropped += queue.expire(now).iter().filter(|(l, _)| *l).count();
        if done == Some(now) {
            let Some(Reverse((_, token, expires, is_light, arrived))) = busy.pop() else {
                break;
            };
            let ticket = Ticket {
                token,
                started: 0,
                in_flight: 0,
                expires,
            };
            limiter.release(ticket, now, Completion::default());
            if is_light {
                light_latencies.push(now - arrived);
            }
            // The freed place goes to the next in the fair queue.
            if let Some(((is_light, arrived), _)) = queue.pop(now) {
                let t = limiter.acquire(Criticality::Default, now).unwrap();
                start(&mut busy, t, now, is_light, arrived);
            }
        } else {
            let Some((_, is_light)) = next.next() else {
                break;
            };
            light_sent += usize::from(is_light);
            match limiter.acquire(Criticality::Default, now) {
                Ok(t) if queue.is_empty() => start(&mut busy, t, now, is_light, now),
                result => {
                    if let Ok(t) = result {
                        // Others wait already: they go first, this one queues.
                        limiter.forget(t, now);
                    }
                    let tenant = if is_light { "light" } else { "heavy" };
                    if queue.push(flow(tenant), 1, (is_light, now), now).is_err() {
                        dropped += usize::from(is_light);
                    }
                }
            }
        }
    }
    light_latencies.sort_unstable();
    let p99 = light_latencies[(light_latencies.len() * 99).div_ceil(100) - 1];
    Light {
        sent: light_sent,
        served: light_latencies.len(),
        dropped,
        p99,
    }
}

#[test]
fn a_light_tenant_is_served_at_once_beside_a_heavy_one() {
    let fair = CAPACITY / 2;
    // A hand of 4: the light tenant waits at most about 5 dispatches, 16 ms at 320 a
    // second. Kubernetes' hand of 8 gives 1.26x here; the hand trades this wait against
    // how rarely heavy tenants cover a light one's whole hand (docs/adaptive.md).
    let alone = run(0, fair / 2, 4);
    let shared = run(10 * fair, fair / 2, 4);
    let ratio = shared.p99 as f64 / alone.p99 as f64;
    println!(
        "light tenant p99: alone {} ms, beside a 10x tenant {} ms ({ratio:.3}x); {shared:?}",
        alone.p99 / MS,
        shared.p99 / MS
    );
    assert_eq!(shared.dropped, 0, "{shared:?}");
    // Every request sent early enough to be answered within the run was answered.
    assert!(shared.sent - shared.served <= 12, "{shared:?}");
    assert!(ratio <= 1.25, "{shared:?} vs {alone:?}");
}

#[test]
fn a_hand_as_large_as_the_lanes_gives_no_isolation() {
    let fair = CAPACITY / 2;
    let alone = run(0, fair / 2, 64);
    // The heavy tenant spreads over every lane, and the light one waits behind it.
    let shared = run(10 * fair, fair / 2, 64);
    println!("hand of 64: {shared:?} vs alone {alone:?}");
    assert!(
        shared.dropped > 0 || shared.p99 > alone.p99 * 2,
        "{shared:?} vs {alone:?}"
    );
}

#[test]
fn a_light_tenant_is_let_in_at_the_next_free_place_whatever_the_hand() {
    // Kubernetes' hand of 8: the heavy tenant fills up to 8 lanes, and a light lane put at
    // the back of the round waited up to 8 of its dispatches (1.26x here). Served before
    // the round, it waits for one.
    let fair = CAPACITY / 2;
    for hand in [1, 4, 8] {
        let alone = run(0, fair / 2, hand);
        let shared = run(10 * fair, fair / 2, hand);
        let ratio = shared.p99 as f64 / alone.p99 as f64;
        println!("hand of {hand}: {ratio:.3}x; {shared:?}");
        assert_eq!(shared.dropped, 0, "{shared:?}");
        assert!(ratio <= 1.1, "hand {hand}: {shared:?} vs {alone:?}");
    }
}
