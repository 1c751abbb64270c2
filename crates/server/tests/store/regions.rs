//! One limit across three regions, on a test bed that is real: three regions on this
//! machine, each its own `redis-server` and its own `ratewarden serve`, the home store in
//! the first region and the others 50 ms and 150 ms away from it (a round trip, through a
//! relay that delays every byte, `testing::Wan`), partitions made by that relay, and a Redis
//! killed with `kill -9`. Every decision is recorded with when it was asked and answered,
//! and a history checker counts what was admitted in every window of the rule against its
//! bound.
//!
//! The rule is a global fixed window (`scope = "global"`) of `LIMIT` per `WINDOW`, falling
//! to a third of it in process when the home cannot be reached (`on_store_failure =
//! "local"`, `local_divide_by = 3`). The stated bound on any window is
//! `LIMIT · (1 + p / 3)`, where `p` is the number of regions cut off from the home during
//! it (docs/serving.md, "Across regions").
//!
//! `REGIONS_WINDOWS` (default 5) sets how many windows each phase lasts; each run prints its
//! figures (`scripts/bench-regions` runs it longer, in release, and collects them), and
//! `REGIONS_TRACE=1` what each region admitted of what it was offered in every tenth of a
//! window.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratewarden_redis::testing::{Server, Wan};

use common::Served;

#[path = "../common/mod.rs"]
mod common;

const LIMIT: u64 = 200;
const WINDOW: Duration = Duration::from_secs(2);
/// What each region is offered when loaded, per second: together four and a half times the
/// limit's rate.
const LOADED: u64 = 150;
/// How far ahead each region takes units: past the farthest round trip (150 ms), and an
/// eighth of the window, so that what a region whose demand fell still holds is little.
const HORIZON_MS: u64 = 250;
/// One way from each region to the home: none (it is there), 25 ms and 75 ms.
const ONE_WAY: [u64; 3] = [0, 25, 75];

fn windows_per_phase() -> u64 {
    std::env::var("REGIONS_WINDOWS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(5)
}

/// The wall clock, as Unix nanoseconds: the decisions are those of real processes on real
/// sockets, whose clocks (and Redis's `TIME`) are the wall's.
#[allow(clippy::disallowed_methods)]
fn unix_ns() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap()
}

/// A region: its Redis (the home, in region 0), its link to the home, and its server.
struct Region {
    redis: Option<Server>,
    wan: Option<Wan>,
    served: Served,
}

/// The three regions; the home store is region 0's Redis.
struct Bed {
    regions: Vec<Region>,
    dir: std::path::PathBuf,
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The global fixed window every test but one uses.
fn fixed_window() -> String {
    format!(
        "algorithm = \"fixed-window\"\nlimit = {LIMIT}\nwindow = \"{}s\"",
        WINDOW.as_secs()
    )
}

fn config(name: &str, own: &str, home: &str, scope: &str, limit: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin = "127.0.0.1:0"

[store]
kind = "redis"
url = "{own}"
deadline = "100ms"

[regions]
name = "{name}"
horizon = "{HORIZON_MS}ms"

[regions.home]
kind = "redis"
url = "{home}"
deadline = "400ms"
breaker_failures = 3
breaker_cool_down = "300ms"

[[limit]]
name = "everyone"
key = ["literal:all"]
{limit}
scope = "{scope}"
on_store_failure = "local"
local_divide_by = 3
"#
    )
}

impl Bed {
    /// Three regions; `scope` is the rule's (`global`, or `region` for a fleet that counts
    /// in each region's own Redis), `limit` its algorithm and numbers.
    async fn start(name: &str, scope: &str, limit: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ratewarden-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let home = Server::start();
        let home_port: u16 = home.url().rsplit(':').next().unwrap().parse().unwrap();
        let mut redis = [Some(home), Some(Server::start()), Some(Server::start())];
        let mut regions = Vec::new();
        for (r, one_way) in ONE_WAY.iter().enumerate() {
            let wan =
                (*one_way > 0).then(|| Wan::start(home_port, Duration::from_millis(*one_way)));
            let home_url = wan
                .as_ref()
                .map_or_else(|| redis[0].as_ref().unwrap().url(), Wan::url);
            let own = redis[r].as_ref().unwrap().url();
            let path = dir.join(format!("region{r}.toml"));
            std::fs::write(
                &path,
                config(&format!("r{r}"), &own, &home_url, scope, limit),
            )
            .unwrap();
            let served = Served::serve_config(&path).await;
            regions.push(Region {
                redis: redis[r].take(),
                wan,
                served,
            });
        }
        Self { regions, dir }
    }

    fn listen(&self) -> Vec<SocketAddr> {
        self.regions.iter().map(|r| r.served.listen).collect()
    }

    /// One decision in each region (a server connects to the home as it starts, several
    /// round trips over the WAN, and a decision made before that is done falls to the
    /// in-process share); then waits for a window to begin. Returns how many decisions
    /// fell back so far, per region.
    async fn warm_up(&self) -> Vec<u64> {
        for r in &self.regions {
            let reply = common::post(r.served.listen, "/v1/check", "{}").await;
            assert_eq!(reply.status, 200, "{}", reply.body);
        }
        at_window_start().await;
        self.fell_back().await
    }

    /// Per region, the global rule's decisions made in process (`local`) and those that
    /// waited on a call to the home (`remote`).
    async fn waited(&self) -> Vec<(u64, u64)> {
        let mut counts = Vec::new();
        for r in &self.regions {
            let admin = r.served.admin.expect("an admin listener");
            let text = common::get(admin, "/metrics", &[]).await.body;
            let count = |decided: &str| -> u64 {
                let name = format!("ratewarden_global_decisions_total{{decided=\"{decided}\"}} ");
                text.lines()
                    .find_map(|l| l.strip_prefix(&name))
                    .map_or(0, |n| n.trim().parse().unwrap())
            };
            counts.push((count("local"), count("remote")));
        }
        counts
    }

    /// Per region, the global rule's decisions that fell back to the in-process share
    /// because the home could not be reached in time.
    async fn fell_back(&self) -> Vec<u64> {
        let mut counts = Vec::new();
        for r in &self.regions {
            let admin = r.served.admin.expect("an admin listener");
            let text = common::get(admin, "/metrics", &[]).await.body;
            let line = text
                .lines()
                .find(|l| {
                    l.starts_with("ratewarden_decisions_total{")
                        && l.contains("rule=\"everyone\"")
                        && l.contains("outcome=\"fell_back\"")
                })
                .unwrap_or_else(|| panic!("no fell_back count in {text}"));
            counts.push(line.rsplit(' ').next().unwrap().parse().unwrap());
        }
        counts
    }
}

/// One decision: which region, when it was sent and answered (Unix nanoseconds, the
/// clock Redis's `TIME` reads on this machine), and whether it was admitted.
#[derive(Debug, Clone, Copy)]
struct Event {
    region: usize,
    sent: u64,
    answered: u64,
    allowed: bool,
}

/// Offers each region `rate(elapsed, region)` decisions a second for `span`, from four
/// paced callers a region; every decision recorded.
async fn offer(
    listen: &[SocketAddr],
    span: Duration,
    rate: impl Fn(Duration, usize) -> u64 + Send + Sync + 'static,
) -> Vec<Event> {
    const CALLERS: usize = 4;
    let events = Arc::new(Mutex::new(Vec::new()));
    let rate = Arc::new(rate);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for (region, &addr) in listen.iter().enumerate() {
        for caller in 0..CALLERS {
            let (events, rate) = (Arc::clone(&events), Arc::clone(&rate));
            tasks.push(tokio::spawn(async move {
                let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
                // Callers start spread over the first gap, then keep their pace.
                let mut next = start + Duration::from_micros(caller as u64 * 1_500);
                loop {
                    let elapsed = next.duration_since(start);
                    if elapsed >= span {
                        return;
                    }
                    let per_second = rate(elapsed, region).max(1);
                    let gap = Duration::from_nanos(CALLERS as u64 * 1_000_000_000 / per_second);
                    tokio::time::sleep_until(next).await;
                    next += gap;
                    if rate(elapsed, region) == 0 {
                        continue;
                    }
                    let sent = unix_ns();
                    let request = Request::post(format!("http://{addr}/v1/check"))
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(b"{}")))
                        .unwrap();
                    let Ok(response) = client.request(request).await else {
                        continue;
                    };
                    let status = response.status();
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    let answered = unix_ns();
                    let allowed = status == 200
                        && serde_json::from_slice::<serde_json::Value>(&body).unwrap()["allowed"]
                            == true;
                    events.lock().unwrap().push(Event {
                        region,
                        sent,
                        answered,
                        allowed,
                    });
                    // A caller that fell behind (a slow answer) does not burst to catch up.
                    let now = tokio::time::Instant::now();
                    if next < now {
                        next = now;
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut events = std::mem::take(&mut *events.lock().unwrap());
    events.sort_by_key(|e| e.sent);
    events
}

/// One window of the history: admitted decisions wholly inside it, those that straddle
/// its start (sent in the window before, answered in it: either window's), and the
/// decisions offered in it.
#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    admitted: u64,
    straddling: u64,
    offered: u64,
    per_region: [u64; 3],
}

/// What the checker found over a run.
#[derive(Debug)]
struct Checked {
    /// The window's start (Unix ns) and what it counted, for every window of the run.
    windows: Vec<(u64, Counted)>,
}

impl Checked {
    /// The history counted by the rule's windows (aligned on the Unix epoch, as the store's
    /// fixed windows are).
    fn of(events: &[Event]) -> Self {
        let w = u64::try_from(WINDOW.as_nanos()).unwrap();
        let mut windows: std::collections::BTreeMap<u64, Counted> = Default::default();
        for e in events {
            let (from, to) = (e.sent / w, e.answered / w);
            windows.entry(from).or_default().offered += 1;
            windows.entry(to).or_default();
            if !e.allowed {
                continue;
            }
            let counted = windows.entry(to).or_default();
            if from == to {
                counted.admitted += 1;
            } else {
                counted.straddling += 1;
            }
            counted.per_region[e.region] += 1;
        }
        Self {
            windows: windows.into_iter().map(|(k, c)| (k * w, c)).collect(),
        }
    }

    /// The largest admitted ÷ bound over the windows whose start `bound` gives a bound
    /// for (`None` skips a window), and that window. A decision that straddles a window's
    /// start was made in one window or the other (somewhere between its sending and its
    /// answer): each goes to the earlier window while that window is within its bound,
    /// else to the later one. So a ratio over 1.0 means that no placement of the
    /// decisions in their own spans keeps every window within its bound: the history
    /// broke it, whatever the clocks.
    fn worst(&self, bound: impl Fn(u64) -> Option<u64>) -> (f64, u64, Counted) {
        let mut worst = (0.0, 0, Counted::default());
        let mut carried = 0;
        for (i, &(start, counted)) in self.windows.iter().enumerate() {
            let next = self.windows.get(i + 1).map_or(0, |(_, c)| c.straddling);
            let here = counted.admitted + carried;
            let Some(bound) = bound(start) else {
                // Unchecked: the straddlers go wherever they fit best for the next.
                carried = 0;
                continue;
            };
            let room = bound.saturating_sub(here);
            let kept = room.min(next);
            carried = next - kept;
            let ratio = (here + kept) as f64 / bound as f64;
            if ratio > worst.0 {
                worst = (ratio, start, counted);
            }
        }
        worst
    }

    /// The smallest share of the limit admitted over the windows wholly inside the run
    /// (not its first and last), where `include` says so, with demand over the limit.
    fn least_used(&self, include: impl Fn(u64) -> bool) -> f64 {
        let inner = &self.windows[1..self.windows.len().saturating_sub(1)];
        inner
            .iter()
            .filter(|(start, c)| include(*start) && c.offered > LIMIT)
            .map(|(_, c)| (c.admitted + c.straddling) as f64 / LIMIT as f64)
            .fold(f64::INFINITY, f64::min)
    }
}

/// The p50 and p99 of the answer times of `region`'s decisions, in microseconds.
fn latency(events: &[Event], region: usize) -> (u64, u64) {
    latency_between(events, region, 0, u64::MAX)
}

/// [`latency`] of the decisions sent from `from` until `to` (Unix ns).
fn latency_between(events: &[Event], region: usize, from: u64, to: u64) -> (u64, u64) {
    let mut times: Vec<u64> = events
        .iter()
        .filter(|e| e.region == region && (from..to).contains(&e.sent))
        .map(|e| (e.answered - e.sent) / 1_000)
        .collect();
    times.sort_unstable();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    (at(0.5), at(0.99))
}

fn window_ns() -> u64 {
    u64::try_from(WINDOW.as_nanos()).unwrap()
}

/// Waits until a window has just begun, so that phases line up with windows.
async fn at_window_start() {
    let w = window_ns();
    let into = unix_ns() % w;
    tokio::time::sleep(Duration::from_nanos(w - into + 20_000_000)).await;
}

/// Steady load over the three regions, then load moving from region to region: no window
/// admits more than the limit, and while demand exceeds it at least 95% of it is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_and_moving_load_never_pass_the_limit_and_use_it() {
    let bed = Bed::start("regions-steady", "global", &fixed_window()).await;
    let phase = WINDOW * u32::try_from(windows_per_phase()).unwrap();
    let before = bed.warm_up().await;
    let began = unix_ns();
    let events = offer(&bed.listen(), phase * 2, move |elapsed, region| {
        if elapsed < phase {
            LOADED
        } else {
            // One region loaded at a time, a window each, the others nearly idle.
            let turn = ((elapsed - phase).as_nanos() / WINDOW.as_nanos()) as usize % 3;
            if turn == region {
                LOADED * 2
            } else {
                5
            }
        }
    })
    .await;
    let checked = Checked::of(&events);
    let (ratio, at, counted) = checked.worst(|_| Some(LIMIT));
    let used = checked.least_used(|_| true);
    let (p50, p99) = latency(&events, 2);
    // While all three are loaded alike (past the phase's first window, in which a region's
    // demand is still being learnt), the least any region admitted of a window: far from
    // the home is not shut out of it.
    let w = window_ns();
    let least_region = checked
        .windows
        .iter()
        .filter(|(start, _)| {
            *start >= began + w && *start + w <= began + phase_ns(windows_per_phase())
        })
        .flat_map(|(_, c)| c.per_region)
        .min()
        .unwrap();
    if std::env::var_os("REGIONS_TRACE").is_some() {
        // Per window, region and tenth of a window: admitted / offered.
        let mut grid: std::collections::BTreeMap<(u64, usize), [(u32, u32); 10]> =
            Default::default();
        for e in &events {
            let tenth = (e.sent % window_ns() * 10 / window_ns()) as usize;
            let cell = &mut grid.entry((e.sent / window_ns(), e.region)).or_default()[tenth];
            cell.1 += 1;
            cell.0 += u32::from(e.allowed);
        }
        for ((w, r), cells) in grid {
            eprintln!("trace: window {w} region {r}: {cells:?}");
        }
    }
    eprintln!(
        "regions steady+moving: {} decisions over {} windows; admitted / bound at most {ratio:.3} \
         (window {at}: {counted:?}); least share used while demand exceeds the limit {used:.3}; \
         region 2 (150 ms from the home) p50 {p50} us, p99 {p99} us; the least a region \
         admitted of a window while all were loaded {least_region}",
        events.len(),
        checked.windows.len()
    );
    for (start, c) in &checked.windows {
        eprintln!("  window {start}: {c:?}");
    }
    let fell_back: Vec<u64> = (bed.fell_back().await.iter().zip(&before))
        .map(|(after, before)| after - before)
        .collect();
    eprintln!("  fell back to the in-process share, per region: {fell_back:?}");
    assert_eq!(fell_back, [0, 0, 0], "the home was always reachable");
    assert!(
        ratio <= 1.0,
        "a window admitted past the limit: {counted:?}"
    );
    assert!(used >= 0.95, "the limit was not used: {used}");
    // An equal split is a third; the nearest region taking what the farthest asked for
    // first would leave it a tenth.
    assert!(
        least_region >= LIMIT / 6,
        "a region was shut out of the limit: {least_region} of {LIMIT}"
    );
}

/// Region 2 cut off from the home for a few windows, then healed; then region 1's own Redis
/// killed (the global rule does not use it); then the home's Redis killed, which cuts every
/// region off. During the cut every window stays within `LIMIT · (1 + 1/3)`, the others
/// still use the limit, and outside it the limit holds; once the home is gone every region
/// decides on its third, `LIMIT · (1 + 3/3)` at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_and_a_killed_redis_stay_within_the_stated_bound() {
    let mut bed = Bed::start("regions-partition", "global", &fixed_window()).await;
    let n = windows_per_phase();
    let phase = WINDOW * u32::try_from(n).unwrap();
    bed.warm_up().await;
    let began = unix_ns();
    let listen = bed.listen();
    let load = tokio::spawn(async move { offer(&listen, phase * 4, move |_, _| LOADED).await });
    // Phase 1 steady; phase 2 region 2 cut off from the home (from a third into a window
    // to the start of another); phase 3 region 1's Redis killed; phase 4 the home killed.
    tokio::time::sleep(phase + WINDOW / 3).await;
    let cut_at = unix_ns();
    bed.regions[2].wan.as_ref().unwrap().partition(true);
    tokio::time::sleep(phase - WINDOW / 3).await;
    bed.regions[2].wan.as_ref().unwrap().partition(false);
    let healed_at = unix_ns();
    let killed = bed.regions[1].redis.take().unwrap();
    killed.signal("KILL");
    let killed_at = unix_ns();
    tokio::time::sleep(phase).await;
    let home = bed.regions[0].redis.take().unwrap();
    home.signal("KILL");
    let home_killed_at = unix_ns();
    let events = load.await.unwrap();
    drop((killed, home));
    let checked = Checked::of(&events);
    let w = window_ns();
    // A window touched by the cut may see the cut region's share on top of the limit; a
    // window after the heal's has the limit again (the breaker's cool-down and a round
    // trip pass within a window).
    let touched = |start: u64| start + w > cut_at && start <= healed_at;
    let homeless = |start: u64| start + w > home_killed_at;
    let (during, at_cut, c_cut) =
        checked.worst(|start| touched(start).then_some(LIMIT + LIMIT / 3));
    let (outside, at_out, c_out) =
        checked.worst(|start| (!touched(start) && !homeless(start)).then_some(LIMIT));
    let (gone, at_gone, c_gone) = checked.worst(|start| homeless(start).then_some(2 * LIMIT));
    let used_outside =
        checked.least_used(|start| !touched(start) && !homeless(start) && start >= began);
    // A region cut off decides in process: none of its decisions waits out the home's
    // deadline (400 ms) while its breaker lets a probe through.
    let (_, cut_p99) = latency_between(&events, 2, cut_at, healed_at);
    let homeless_p99: Vec<u64> = (0..3)
        .map(|r| latency_between(&events, r, home_killed_at, u64::MAX).1)
        .collect();
    // While cut off, the others still take the limit between them.
    let others_cut = checked
        .windows
        .iter()
        .filter(|(start, _)| *start >= cut_at && *start + w <= healed_at)
        .map(|(_, c)| (c.per_region[0] + c.per_region[1]) as f64 / LIMIT as f64)
        .fold(f64::INFINITY, f64::min);
    eprintln!(
        "regions partition: {} decisions; during the cut admitted / (LIMIT * 4/3) at most \
         {during:.3} (window {at_cut}: {c_cut:?}); outside it admitted / LIMIT at most \
         {outside:.3} (window {at_out}: {c_out:?}); least share used outside the cut \
         {used_outside:.3}; the two connected regions' share while cut {others_cut:.3}; \
         region 1's Redis killed at {killed_at}; once the home was killed admitted / \
         (LIMIT * 2) at most {gone:.3} (window {at_gone}: {c_gone:?}); p99 of the region cut \
         off while cut {cut_p99} us, of each region without a home {homeless_p99:?} us",
        events.len()
    );
    for (start, c) in &checked.windows {
        eprintln!("  window {start}: {c:?}");
    }
    assert!(
        during <= 1.0,
        "past the stated bound during the cut: {c_cut:?}"
    );
    assert!(outside <= 1.0, "past the limit outside the cut: {c_out:?}");
    assert!(
        gone <= 1.0,
        "past the stated bound without a home: {c_gone:?}"
    );
    for p99 in homeless_p99.iter().chain([&cut_p99]) {
        assert!(
            *p99 < 100_000,
            "a decision waited on a home out of reach: p99 {p99} us"
        );
    }
    assert!(
        others_cut >= 0.95,
        "the connected regions lost the limit: {others_cut}"
    );
    assert!(
        used_outside >= 0.95,
        "the limit was not used: {used_outside}"
    );
    // The cut region decided on its share while cut off: it admitted, and not past it.
    let cut_windows: Vec<&Counted> = checked
        .windows
        .iter()
        .filter(|(start, _)| *start >= cut_at && *start + w <= healed_at)
        .map(|(_, c)| c)
        .collect();
    assert!(!cut_windows.is_empty());
    for c in cut_windows {
        // (A decision straddling the window's start may be the window before's.)
        assert!(
            c.per_region[2] > 0 && c.per_region[2] <= LIMIT / 3 + c.straddling,
            "{c:?}"
        );
    }
    // Without a home every region decides on its third, and admits.
    let homeless_windows: Vec<&Counted> = checked
        .windows
        .iter()
        .filter(|(start, _)| *start >= home_killed_at && *start + w <= began + 4 * phase_ns(n))
        .map(|(_, c)| c)
        .collect();
    assert!(!homeless_windows.is_empty());
    for c in homeless_windows {
        for &admitted in &c.per_region {
            assert!(
                admitted > 0 && admitted <= LIMIT / 3 + c.straddling,
                "{c:?}"
            );
        }
    }
}

/// `windows` windows, in nanoseconds.
fn phase_ns(windows: u64) -> u64 {
    windows * window_ns()
}

/// Whether the admitted decisions (at their answers' times) conform to a bucket of
/// `capacity` filling at `rate` a second: the largest deficit found, 0 when they do.
fn bucket_excess(events: &[Event], rate: u64, capacity: u64) -> f64 {
    let mut times: Vec<u64> = events
        .iter()
        .filter(|e| e.allowed)
        .map(|e| e.answered)
        .collect();
    times.sort_unstable();
    let (mut tokens, mut last, mut excess) = (capacity as f64, 0u64, 0.0f64);
    for t in times {
        if last > 0 {
            let refill = (t - last) as f64 * rate as f64 / 1e9;
            tokens = (tokens + refill).min(capacity as f64);
        }
        last = t;
        tokens -= 1.0;
        excess = excess.max(-tokens);
    }
    excess
}

/// A global GCRA rule: allowances are topped up in the background and never lapse at a
/// window's end, so a region's decisions wait on the home only for a key's first (counted
/// by the server: `ratewarden_global_decisions_total{decided="remote"}`). What the fleet
/// admits conforms to one bucket of the rule's burst plus a horizon's rate (units taken
/// ahead are spent up to a horizon later). The same load on a fleet that counts the rule
/// in each region's own Redis (`scope = "region"`) gives the latency to compare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_bucket_decides_in_the_region_without_waiting_on_the_wan() {
    const RATE: u64 = 100;
    const BURST: u64 = 50;
    let gcra = format!("algorithm = \"gcra\"\nrate = \"{RATE}/s\"\nburst = {BURST}");
    let span = WINDOW * u32::try_from(windows_per_phase()).unwrap();
    let mut p99 = Vec::new();
    for scope in ["global", "region"] {
        let bed = Bed::start(&format!("regions-gcra-{scope}"), scope, &gcra).await;
        bed.warm_up().await;
        let before = bed.waited().await;
        let events = offer(&bed.listen(), span, |_, _| LOADED).await;
        let (p50, p99_far) = latency(&events, 2);
        p99.push(p99_far);
        let admitted = events.iter().filter(|e| e.allowed).count();
        if scope == "global" {
            let waited: Vec<u64> = (bed.waited().await.iter().zip(&before))
                .map(|(after, before)| after.1 - before.1)
                .collect();
            // A horizon's rate on top of the burst.
            let capacity = BURST + RATE * HORIZON_MS / 1000;
            let excess = bucket_excess(&events, RATE, capacity);
            let allows = span.as_secs() * RATE + capacity;
            eprintln!(
                "regions gcra global: {admitted} admitted of {} (the bucket allows {allows}); \
                 bucket of {capacity} exceeded by {excess:.1}; decisions that waited on the home \
                 per region {waited:?}; region 2 p50 {p50} us, p99 {p99_far} us",
                events.len()
            );
            assert!(
                excess <= 1.0,
                "past one bucket of {capacity} at {RATE}/s: {excess}"
            );
            assert!(
                admitted as u64 * 100 >= span.as_secs() * RATE * 95,
                "{admitted} admitted of {RATE}/s"
            );
            for (r, &n) in waited.iter().enumerate() {
                assert!(n <= 2, "region {r}: {n} decisions waited on the home");
            }
        } else {
            eprintln!(
                "regions gcra per region: {admitted} admitted of {}; region 2 p50 {p50} us, \
                 p99 {p99_far} us",
                events.len()
            );
        }
    }
    eprintln!(
        "regions gcra: region 2's p99, global / per-region fleet = {:.2}",
        p99[0] as f64 / p99[1] as f64
    );
}
