//! Keyed decisions per second: ratewarden's [`MemoryStore`] against governor's keyed limiter
//! (`RateLimiter::keyed`, a `DashMap` of GCRA cells) and a plain sharded map (the floor: one
//! hash, one read-locked lookup and one atomic compare-and-swap per decision), on the same
//! quota, the same pre-generated keys and the real clock, with 1 and 2 threads; then resident
//! memory per key at 1 and 10 million keys (each structure measured in a child process of its
//! own, so one's freed memory cannot hide or inflate the next's).
//!
//! Run with `cargo bench -p ratewarden-memory --bench keyed`. Every case's limiters share a
//! benchmark group, so the ratios come from one run. On a loaded machine, set
//! `RATEWARDEN_KEYED_ALTERNATE=7` to alternate short runs between the limiters instead (the
//! figures in docs/benchmarks.md); the filter `growth` adds the cost-growth cases (1k to 10M
//! keys) and `memory` runs the memory report alone.
//!
//! `ratewarden-check` is our store through `MemoryStore::check` (like governor's `check_key`:
//! "go now" or a refusal whose numbers are computed only when read), beside `ratewarden`
//! through `decide` (every decision's numbers computed), on the 1k uniform, flood and hot-key
//! cases.
//!
//! Quotas:
//! - **live** (the main cases): 1 per minute, burst 100 million. Every key's state stays live
//!   for a minute after each decision, so no limiter drops or re-creates a pre-populated key
//!   during a group (our store drops states that have returned to fresh; governor never
//!   does), and practically every decision is allowed: a like-for-like lookup and update.
//! - **churn** (1000 per second, burst 1000): a key's state is fresh again 1 ms after its
//!   last decision, so at a million keys our store drops most states (two sweep steps per
//!   new key) and re-creates them on their next decision, while governor keeps every key.
//! - **flood** (50 per second, burst 100, over 1k keys): the realistic abuse case. Each key
//!   is asked thousands of times a second, so after its burst nearly every decision is a
//!   rejection: this measures the rejected path, which the live cases never take.

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, PoisonError, RwLock};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use hashbrown::HashTable;
use ratewarden_core::algorithm::GcraState;
use ratewarden_core::{Clock, Gcra, Limit, LimitState, Rate, RealClock};
use ratewarden_memory::{MemoryStore, StoreConfig, Stored};

/// Length of a pre-generated key sequence (at least the number of keys).
const SEQUENCE: usize = 1 << 20;
/// Zipf exponent of the skewed cases.
const ZIPF_S: f64 = 1.1;
/// `max_keys` of the stores in the memory measurement: room for the largest count, 10 million.
const MEMORY_MAX_KEYS: usize = 11_000_000;
/// The environment variable that turns this binary into a memory-measuring child.
const MEMORY_CHILD: &str = "RATEWARDEN_KEYED_BENCH_MEMORY";

/// One quota, given to all three limiters.
#[derive(Clone, Copy)]
struct QuotaSpec {
    name: &'static str,
    /// Cells per period.
    count: u32,
    period: Duration,
    burst: u32,
}

/// 1 per minute, burst 100 million: states stay live, decisions are allowed.
const LIVE: QuotaSpec = QuotaSpec {
    name: "1/min burst 1e8",
    count: 1,
    period: Duration::from_secs(60),
    burst: 100_000_000,
};

/// 1000 per second, burst 1000: states are fresh 1 ms after their last decision.
const CHURN: QuotaSpec = QuotaSpec {
    name: "1000/s burst 1000",
    count: 1000,
    period: Duration::from_secs(1),
    burst: 1000,
};

impl QuotaSpec {
    fn gcra(self) -> Gcra {
        let rate = Rate::new(u64::from(self.count), self.period).expect("valid rate");
        Gcra::new(rate, u64::from(self.burst)).expect("valid burst")
    }

    fn governor(self) -> Quota {
        let interval = self.period / self.count;
        Quota::with_period(interval)
            .expect("non-zero period")
            .allow_burst(NonZeroU32::new(self.burst).expect("non-zero burst"))
    }

    fn interval_ns(self) -> u64 {
        (self.period / self.count).as_nanos() as u64
    }
}

/// 50 per second, burst 100: under the benchmark's load, nearly every decision is rejected.
const FLOOD: QuotaSpec = QuotaSpec {
    name: "50/s burst 100",
    count: 50,
    period: Duration::from_secs(1),
    burst: 100,
};

/// A keyed limiter under test: one decision for one key, at the real clock.
///
/// Keys are `&String` because governor's `check_key` takes `&K`; the others use `as_str()`.
#[allow(clippy::ptr_arg)]
trait Keyed: Sync {
    fn decide(&self, key: &String, clock: &RealClock) -> bool;
}

/// Our store, with the algorithm it is generic over.
struct Ours<A: Stored> {
    store: MemoryStore<A>,
    limit: A,
}

impl<A: Stored> Ours<A> {
    /// A store of 64 shards (the default) holding up to `max_keys`.
    fn new(limit: A, max_keys: usize) -> Self {
        let config = StoreConfig {
            max_keys,
            // The count is the bound measured here (10 million keys exceed the default bytes).
            max_bytes: usize::MAX,
            ..StoreConfig::default()
        };
        Self {
            store: MemoryStore::new(config),
            limit,
        }
    }
}

impl<A: Stored + Sync> Keyed for Ours<A> {
    #[inline]
    fn decide(&self, key: &String, clock: &RealClock) -> bool {
        self.store
            .decide(&self.limit, key.as_str(), clock.now(), 1)
            .is_allowed()
    }
}

/// Our store through `check`: "go now" or a refusal whose numbers are computed only when
/// read (never, here), like governor's `check_key`.
struct Checked<'a>(&'a Ours<Gcra>);

impl Keyed for Checked<'_> {
    #[inline]
    fn decide(&self, key: &String, clock: &RealClock) -> bool {
        self.0
            .store
            .check(&self.0.limit, key.as_str(), clock.now(), 1)
            .is_ok()
    }
}

impl Keyed for DefaultKeyedRateLimiter<String> {
    #[inline]
    fn decide(&self, key: &String, _clock: &RealClock) -> bool {
        // Governor reads its own default clock (std `Instant` without the quanta feature).
        self.check_key(key).is_ok()
    }
}

/// A shard on cache lines of its own, as in our store.
#[repr(align(128))]
struct Padded<T>(T);

/// One shard of the floor: keys and their GCRA-like arrival times.
type BaselineShard = RwLock<HashTable<(String, AtomicU64)>>;

/// The floor: 64 shards of `RwLock<HashTable<(String, AtomicU64)>>`, one SipHash (the same
/// randomly seeded std hasher as ours and governor's) choosing both the shard and the bucket,
/// a read-locked lookup by `&str`, and one `compare_exchange` doing a GCRA-like update.
struct Baseline {
    shards: Box<[Padded<BaselineShard>]>,
    hasher: RandomState,
    interval: u64,
    tolerance: u64,
}

impl Baseline {
    fn new(quota: QuotaSpec) -> Self {
        let interval = quota.interval_ns();
        Self {
            shards: (0..64)
                .map(|_| Padded(RwLock::new(HashTable::new())))
                .collect(),
            hasher: RandomState::new(),
            interval,
            tolerance: interval * u64::from(quota.burst),
        }
    }

    fn shard(&self, hash: u64) -> &BaselineShard {
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)].0
    }

    /// Adds `key` (before timing; the timed loops only look keys up).
    fn insert(&self, key: &str) {
        let hash = self.hasher.hash_one(key);
        let mut shard = self
            .shard(hash)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if shard.find(hash, |(k, _)| k == key).is_none() {
            let hasher = &self.hasher;
            shard.insert_unique(hash, (key.to_owned(), AtomicU64::new(0)), |(k, _)| {
                hasher.hash_one(k.as_str())
            });
        }
    }
}

impl Keyed for Baseline {
    #[inline]
    fn decide(&self, key: &String, clock: &RealClock) -> bool {
        let now = clock.now();
        let key = key.as_str();
        let hash = self.hasher.hash_one(key);
        let shard = self
            .shard(hash)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let Some((_, tat)) = shard.find(hash, |(k, _)| k == key) else {
            return false;
        };
        let current = tat.load(Ordering::Acquire);
        let next = current.max(now) + self.interval;
        next - now <= self.tolerance
            && tat
                .compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }
}

/// xorshift64*: a small, fixed-seed generator for key sequences.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Samples ranks `0..n` with weights `1 / (rank + 1)^s`: cumulative weights and binary search.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut total = 0.0;
        let mut cumulative: Vec<f64> = (1..=n)
            .map(|k| {
                total += 1.0 / (k as f64).powf(s);
                total
            })
            .collect();
        for c in &mut cumulative {
            *c /= total;
        }
        Self { cumulative }
    }

    fn sample(&self, rng: &mut XorShift) -> usize {
        let u = rng.unit();
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len() - 1)
    }
}

fn make_keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("key-{i:07}")).collect()
}

#[derive(Clone, Copy)]
enum Popularity {
    Uniform,
    Zipf,
}

/// A sequence of keys to decide on, cloned in order so the benchmark's own reads of the key
/// bytes are sequential (as if each key had just been parsed from a request).
fn make_sequence(keys: &[String], popularity: Popularity, seed: u64) -> Vec<String> {
    let mut rng = XorShift(seed);
    let len = SEQUENCE.max(keys.len());
    let indices: Vec<usize> = match popularity {
        // Shuffled passes over all keys: every key is used, equally often.
        Popularity::Uniform => {
            let mut out = Vec::with_capacity(len + keys.len());
            while out.len() < len {
                let mut pass: Vec<usize> = (0..keys.len()).collect();
                for i in (1..pass.len()).rev() {
                    pass.swap(i, rng.below(i + 1));
                }
                out.extend(pass);
            }
            out.truncate(len);
            out
        }
        Popularity::Zipf => {
            let zipf = Zipf::new(keys.len(), ZIPF_S);
            (0..len).map(|_| zipf.sample(&mut rng)).collect()
        }
    };
    indices.into_iter().map(|i| keys[i].clone()).collect()
}

/// Decides `iters` times over `threads` threads, each on its own slice of `seq`; returns the
/// wall time and how many were allowed.
// `Instant::now` times the benchmark for criterion (as `Bencher::iter` does), not a decision.
#[allow(clippy::disallowed_methods)]
fn run<L: Keyed>(
    limiter: &L,
    clock: &RealClock,
    seq: &[String],
    threads: usize,
    iters: u64,
) -> (Duration, u64) {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let slice = &seq[t * seq.len() / threads..(t + 1) * seq.len() / threads];
                let count = iters / threads as u64 + u64::from((t as u64) < iters % threads as u64);
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let mut allowed = 0u64;
                    let mut i = 0;
                    for _ in 0..count {
                        allowed += u64::from(limiter.decide(&slice[i], clock));
                        i += 1;
                        if i == slice.len() {
                            i = 0;
                        }
                    }
                    allowed
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let allowed = handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .sum();
        (start.elapsed(), allowed)
    })
}

/// The environment variable that replaces criterion's runs (each limiter measured for two
/// seconds, one after another) by short runs alternating between the limiters: on a shared
/// machine whose load drifts, each round's ratio compares runs a fraction of a second apart.
const ALTERNATE: &str = "RATEWARDEN_KEYED_ALTERNATE";

/// Runs one limiter on so many threads for so many decisions: the wall time, and how many
/// were allowed.
type Runner<'a> = dyn Fn(usize, u64) -> (Duration, u64) + 'a;

/// Rounds of alternating runs, when asked for.
fn alternate_rounds() -> Option<usize> {
    std::env::var(ALTERNATE).ok()?.parse().ok()
}

/// Runs each limiter for about 150 ms in turn, `rounds` times, and prints each one's
/// decisions per second (and the wall time of one decision on one thread) and its ratio to
/// governor's in the same round (medians, and the spread from the lowest to the highest
/// round), as one `ALT` line per limiter.
fn alternate(group: &str, threads: usize, rounds: usize, limiters: &[(&str, &Runner<'_>)]) {
    // Calibrate each limiter alone: iterations for about 150 ms.
    let iters: Vec<u64> = limiters
        .iter()
        .map(|(_, run)| {
            let probe = 200_000;
            let (elapsed, _) = run(threads, probe);
            (probe as f64 * 0.15 / elapsed.as_secs_f64().max(1e-6)) as u64 + 1
        })
        .collect();
    let mut rates = vec![Vec::with_capacity(rounds); limiters.len()];
    let mut allowed = vec![0u64; limiters.len()];
    let mut total = vec![0u64; limiters.len()];
    for round in 0..rounds {
        // Start each round with a different limiter, so none always runs first.
        for k in 0..limiters.len() {
            let k = (k + round) % limiters.len();
            let (elapsed, a) = (limiters[k].1)(threads, iters[k]);
            rates[k].push(iters[k] as f64 / elapsed.as_secs_f64() / 1e6);
            allowed[k] += a;
            total[k] += iters[k];
        }
    }
    let governor = limiters.iter().position(|(name, _)| *name == "governor");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    for (k, (name, _)) in limiters.iter().enumerate() {
        let (m, lo, hi) = median(rates[k].clone());
        let ratio = governor
            .map(|g| {
                let (m, lo, hi) = median((0..rounds).map(|r| rates[k][r] / rates[g][r]).collect());
                format!("{m:.2} [{lo:.2}-{hi:.2}]")
            })
            .unwrap_or_default();
        println!(
            "ALT {group} {threads}-thread {name:<16} {m:6.2} M/s [{lo:.2}-{hi:.2}] {:5.0} ns/decision/thread, vs governor {ratio} ({:.1}% allowed)",
            threads as f64 * 1e3 / m,
            100.0 * allowed[k] as f64 / total[k].max(1) as f64
        );
    }
}

/// [`run`] for our store's batch API: each thread decides its slice sixteen keys at a time
/// with `decide_many`.
// `Instant::now` times the benchmark, as in `run`.
#[allow(clippy::disallowed_methods)]
fn run_batch(
    ours: &Ours<Gcra>,
    clock: &RealClock,
    seq: &[String],
    threads: usize,
    iters: u64,
) -> (Duration, u64) {
    const BATCH: usize = 16;
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let slice = &seq[t * seq.len() / threads..(t + 1) * seq.len() / threads];
                let count = iters / threads as u64;
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let mut out = Vec::with_capacity(BATCH);
                    let mut keys: Vec<&str> = Vec::with_capacity(BATCH);
                    let (mut allowed, mut done, mut i) = (0u64, 0u64, 0);
                    while done < count {
                        keys.clear();
                        while keys.len() < BATCH {
                            keys.push(slice[i].as_str());
                            i = if i + 1 == slice.len() { 0 } else { i + 1 };
                        }
                        out.clear();
                        ours.store
                            .decide_many(&ours.limit, &keys, clock.now(), 1, &mut out);
                        allowed += out.iter().filter(|d| d.is_allowed()).count() as u64;
                        done += BATCH as u64;
                    }
                    allowed
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let allowed = handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .sum();
        (start.elapsed(), allowed)
    })
}

/// Decides once on every key, so every limiter starts with all keys present.
fn populate<L: Keyed>(limiter: &L, clock: &RealClock, keys: &[String]) {
    for key in keys {
        limiter.decide(key, clock);
    }
}

/// One case: our store (GCRA, and optionally the `Limit` enum), governor and the floor, with
/// each thread count, in one benchmark group.
struct Case<'a> {
    group: &'a str,
    keys: &'a [String],
    seq: &'a [String],
    quota: QuotaSpec,
    threads: &'a [usize],
    with_limit_enum: bool,
    /// Whether to add our batch API (`decide_many`) to the alternating runs.
    batch: bool,
    /// Whether to add our `check` (a refusal's numbers computed only when read).
    check: bool,
}

/// Whether a benchmark group is selected by the filter on the command line (criterion's own
/// filter would skip its measurements, but only after the case had filled every limiter).
fn selected(group: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    // Criterion reads the filter as a regular expression; alternatives (`a|b`) and plain
    // substrings are all these runs use.
    filters.is_empty()
        || filters
            .iter()
            .flat_map(|f| f.split('|'))
            .any(|f| group.contains(f))
}

/// Whether a filter on the command line names `group` (an empty filter does not).
fn asked_for(group: &str) -> bool {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .any(|f| f.split('|').any(|f| group.contains(f)))
}

fn bench_case(c: &mut Criterion, case: &Case<'_>) {
    if !selected(case.group) {
        return;
    }
    let clock = RealClock::new();
    let gcra = case.quota.gcra();
    // Room for every key with slack for uneven shards: nothing is evicted for space.
    let max_keys = case.keys.len() * 2 + 1024;
    let ours = Ours::new(gcra, max_keys);
    let ours_limit = case
        .with_limit_enum
        .then(|| Ours::new(Limit::from(gcra), max_keys));
    let governor: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(case.quota.governor());
    let baseline = Baseline::new(case.quota);
    for key in case.keys {
        baseline.insert(key);
    }
    populate(&ours, &clock, case.keys);
    if let Some(ours_limit) = &ours_limit {
        populate(ours_limit, &clock, case.keys);
    }
    populate(&governor, &clock, case.keys);
    println!(
        "\n== {}: {} keys, sequence of {}, quota {} ==",
        case.group,
        case.keys.len(),
        case.seq.len(),
        case.quota.name
    );

    if let Some(rounds) = alternate_rounds() {
        let run_ours = |t, n| run(&ours, &clock, case.seq, t, n);
        let run_governor = |t, n| run(&governor, &clock, case.seq, t, n);
        let run_baseline = |t, n| run(&baseline, &clock, case.seq, t, n);
        let run_limit = |t, n| {
            let ours_limit = ours_limit.as_ref().expect("only listed with the enum");
            run(ours_limit, &clock, case.seq, t, n)
        };
        let mut limiters: Vec<(&str, &Runner<'_>)> = vec![
            ("ratewarden", &run_ours),
            ("governor", &run_governor),
            ("baseline", &run_baseline),
        ];
        if ours_limit.is_some() {
            limiters.insert(1, ("ratewarden-limit", &run_limit));
        }
        let run_many = |t, n| run_batch(&ours, &clock, case.seq, t, n);
        if case.batch {
            limiters.insert(1, ("ratewarden-batch", &run_many));
        }
        let run_check = |t, n| run(&Checked(&ours), &clock, case.seq, t, n);
        if case.check {
            limiters.insert(1, ("ratewarden-check", &run_check));
        }
        for &threads in case.threads {
            alternate(case.group, threads, rounds, &limiters);
        }
        return;
    }

    let mut group = c.benchmark_group(case.group);
    group.throughput(Throughput::Elements(1));
    for &threads in case.threads {
        let param = format!("{threads}-thread");
        let mut one = |name: &str, limiter: &dyn Fn(u64) -> (Duration, u64)| {
            let tally = Cell::new((0u64, 0u64));
            group.bench_function(BenchmarkId::new(name, &param), |b| {
                b.iter_custom(|iters| {
                    let (elapsed, allowed) = limiter(iters);
                    let (a, n) = tally.get();
                    tally.set((a + allowed, n + iters));
                    elapsed
                });
            });
            let (a, n) = tally.get();
            println!(
                "   {}/{name}/{param}: {:.2}% of {n} decisions allowed",
                case.group,
                100.0 * a as f64 / n.max(1) as f64
            );
        };
        one("ratewarden", &|iters| {
            run(&ours, &clock, case.seq, threads, iters)
        });
        if case.check {
            one("ratewarden-check", &|iters| {
                run(&Checked(&ours), &clock, case.seq, threads, iters)
            });
        }
        if let Some(ours_limit) = &ours_limit {
            one("ratewarden-limit", &|iters| {
                run(ours_limit, &clock, case.seq, threads, iters)
            });
        }
        one("governor", &|iters| {
            run(&governor, &clock, case.seq, threads, iters)
        });
        one("baseline", &|iters| {
            run(&baseline, &clock, case.seq, threads, iters)
        });
    }
    group.finish();

    let stats = ours.store.stats();
    println!(
        "   ratewarden store after the group: {} keys (governor: {}), {} dropped fresh, {} evicted live, {} contended locks",
        stats.keys,
        governor.len(),
        stats.evicted_fresh,
        stats.evicted_live,
        stats.contention
    );
    if let Some(ours_limit) = &ours_limit {
        let stats = ours_limit.store.stats();
        println!(
            "   ratewarden-limit store after the group: {} keys, {} dropped fresh, {} evicted live",
            stats.keys, stats.evicted_fresh, stats.evicted_live
        );
    }
}

fn throughput(c: &mut Criterion, measuring: bool) {
    let thousand = make_keys(1_000);
    // `cargo test` runs each benchmark once to prove it works: a debug build filling a
    // million keys several times over would take minutes for nothing.
    let million = make_keys(if measuring { 1_000_000 } else { 20_000 });
    let both = [1, 2];
    for (keys, label) in [(&thousand, "1k"), (&million, "1M")] {
        for (popularity, pop) in [(Popularity::Uniform, "uniform"), (Popularity::Zipf, "zipf")] {
            let seq = make_sequence(keys, popularity, 0x9e37_79b9_7f4a_7c15);
            bench_case(
                c,
                &Case {
                    group: &format!("keyed/{label}-{pop}"),
                    keys,
                    seq: &seq,
                    quota: LIVE,
                    threads: &both,
                    with_limit_enum: matches!(popularity, Popularity::Uniform),
                    batch: matches!(popularity, Popularity::Uniform),
                    check: matches!(popularity, Popularity::Uniform),
                },
            );
        }
    }
    let seq = make_sequence(&thousand, Popularity::Uniform, 0x6a09_e667_f3bc_c908);
    bench_case(
        c,
        &Case {
            group: "keyed/1k-flood",
            keys: &thousand,
            seq: &seq,
            quota: FLOOD,
            threads: &both,
            with_limit_enum: true,
            batch: false,
            check: true,
        },
    );
    let hot = &thousand[..1];
    let hot_seq = vec![hot[0].clone(); 1024];
    bench_case(
        c,
        &Case {
            group: "keyed/hot-key",
            keys: hot,
            seq: &hot_seq,
            quota: LIVE,
            threads: &both,
            with_limit_enum: false,
            batch: false,
            check: true,
        },
    );
    let seq = make_sequence(&million, Popularity::Uniform, 0x2545_f491_4f6c_dd1d);
    bench_case(
        c,
        &Case {
            group: "keyed/1M-uniform-churn",
            keys: &million,
            seq: &seq,
            quota: CHURN,
            threads: &both,
            with_limit_enum: false,
            batch: false,
            check: false,
        },
    );
    // Cost growth: one uniform case at four sizes, only when a filter names it (`growth`):
    // ten million keys take gigabytes in each structure.
    if measuring && asked_for("keyed/growth") {
        for (n, label) in [
            (1_000, "1k"),
            (100_000, "100k"),
            (1_000_000, "1M"),
            (10_000_000, "10M"),
        ] {
            let keys = make_keys(n);
            let seq = make_sequence(&keys, Popularity::Uniform, 0x243f_6a88_85a3_08d3);
            bench_case(
                c,
                &Case {
                    group: &format!("keyed/growth-{label}"),
                    keys: &keys,
                    seq: &seq,
                    quota: LIVE,
                    threads: &both,
                    with_limit_enum: false,
                    batch: false,
                    check: false,
                },
            );
        }
    }
}

/// Resident bytes of this process (`/proc/self/statm`, pages of 4096 bytes).
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages in statm");
    pages * 4096
}

/// Peak resident bytes of this process (`VmHWM`).
fn peak_resident() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .expect("VmHWM in status")
        * 1024
}

/// In a child process: inserts `n` keys into one structure and prints what it cost.
fn memory_child(spec: &str) {
    let (which, n) = spec.split_once(':').expect("structure:keys");
    let n: usize = n.parse().expect("key count");
    let keys = make_keys(n);
    let clock = RealClock::new();
    let before = resident();
    let start = clock.now();
    // Prints one machine-readable line; each arm calls it while its structure is alive.
    let report = |held: usize, allocated: usize| {
        let insert_ns = clock.now() - start;
        let key_bytes: usize = keys.iter().map(String::len).sum();
        println!(
            "MEMORY {which} {n} {held} {before} {} {} {allocated} {key_bytes} {insert_ns}",
            resident(),
            peak_resident()
        );
    };
    match which {
        "ratewarden" => {
            let ours = Ours::new(LIVE.gcra(), MEMORY_MAX_KEYS);
            populate(&ours, &clock, &keys);
            let stats = ours.store.stats();
            report(stats.keys, stats.allocated_bytes);
        }
        "ratewarden-limit" => {
            let ours = Ours::new(Limit::from(LIVE.gcra()), MEMORY_MAX_KEYS);
            populate(&ours, &clock, &keys);
            let stats = ours.store.stats();
            report(stats.keys, stats.allocated_bytes);
        }
        "governor" => {
            let governor: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(LIVE.governor());
            populate(&governor, &clock, &keys);
            report(governor.len(), 0);
        }
        "baseline" => {
            let baseline = Baseline::new(LIVE);
            for key in &keys {
                baseline.insert(key);
            }
            let held = baseline
                .shards
                .iter()
                .map(|s| s.0.read().unwrap_or_else(PoisonError::into_inner).len())
                .sum();
            report(held, 0);
        }
        other => panic!("unknown structure {other}"),
    }
}

/// Measures every structure at a thousand to ten million keys, each in a fresh child
/// process (below a million, resident bytes move by whole pages: read the allocated bytes).
fn memory_report() {
    let exe = std::env::current_exe().expect("current exe");
    println!("\n== resident memory per key (RSS from /proc/self/statm, after - before inserting; each structure in its own process) ==");
    println!(
        "{:<18} {:>10} {:>10} {:>12} {:>12} {:>15} {:>13} {:>12}",
        "structure",
        "keys",
        "held",
        "RSS B/key",
        "peak B/key",
        "allocated B/key",
        "avg key len",
        "insert ns/key"
    );
    println!(
        "our stores: max_keys {MEMORY_MAX_KEYS}, 64 shards; per-key state: GcraState {} B, LimitState {} B (our slot adds a 24-byte inline key and 8 bytes of expiry); governor: String {} B + heap key, state 8 B",
        std::mem::size_of::<GcraState>(),
        std::mem::size_of::<LimitState>(),
        std::mem::size_of::<String>()
    );
    for n in [1_000usize, 100_000, 1_000_000, 10_000_000] {
        for which in ["ratewarden", "ratewarden-limit", "governor", "baseline"] {
            let out = Command::new(&exe)
                .env(MEMORY_CHILD, format!("{which}:{n}"))
                .output()
                .expect("run memory child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let Some(line) = stdout.lines().find(|l| l.starts_with("MEMORY ")) else {
                println!(
                    "{which} {n}: child failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                continue;
            };
            let f: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| f[i].parse::<usize>().expect("number");
            let (held, before, after, peak, allocated, key_bytes, insert_ns) =
                (num(3), num(4), num(5), num(6), num(7), num(8), num(9));
            let per = |bytes: usize| bytes as f64 / n as f64;
            let allocated = if allocated == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}", per(allocated))
            };
            println!(
                "{which:<18} {n:>10} {held:>10} {:>12.1} {:>12.1} {allocated:>15} {:>13.1} {:>12.0}",
                per(after.saturating_sub(before)),
                per(peak.saturating_sub(before)),
                per(key_bytes),
                per(insert_ns),
            );
        }
    }
    println!();
}

fn main() {
    if let Ok(spec) = std::env::var(MEMORY_CHILD) {
        memory_child(&spec);
        return;
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args();
    // `cargo bench` passes `--bench`; `cargo test` runs the benchmarks once without it.
    let measuring = std::env::args().any(|a| a == "--bench");
    // Skip the memory report under `cargo test`, and when a filter does not ask for it
    // (`-- memory` runs it alone).
    if measuring && selected("memory") {
        memory_report();
    }
    throughput(&mut criterion, measuring);
    criterion.final_summary();
}
