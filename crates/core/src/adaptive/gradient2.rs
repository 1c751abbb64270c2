//! Gradient2 (Netflix's recommended controller): the short RTT against a slow average of
//! it, so that the limit follows an upstream whose normal latency drifts.

use super::window::{Aggregate, WindowUpdate};

/// Gradient2's parameters. Netflix's controller with defaults meant to need no tuning to the
/// upstream's size (held in the simulator from 4 to 256 workers; docs/adaptive.md has the
/// figures over sockets): a start of 4 and a floor of 1 (Netflix's 20 and 20 sit above a small
/// upstream's workers, so the limit could never protect it), a ceiling of 1,000 (Netflix's
/// 200 caps an upstream of 256 workers at 78 % of it), and the headroom grown with the limit
/// (`queue_size` unset: about `√L / 2`; Netflix's first gradient controller grows it as `√L`);
/// smoothing 0.2, long window 600, tolerance 1 (Netflix's 1.5 keeps half the workers'
/// worth queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gradient2Config {
    /// The limit to start from.
    pub initial: u64,
    /// The lowest limit.
    pub min: u64,
    /// The highest limit.
    pub max: u64,
    /// How much of the new limit is taken each window, in thousandths.
    pub smoothing_permille: u64,
    /// The headroom added each window, in requests; `None`: [`auto_queue`] of the limit.
    pub queue_size: Option<u64>,
    /// The long average's window, in windows (its weight is `2 / (long_window + 1)`).
    pub long_window: u64,
    /// How far the short RTT may run above the long one before the limit comes down, in
    /// thousandths. The long RTT here is a no-load reference, so anything above 1 lets a
    /// standing queue of that share of the upstream's workers build (1.5: half of them),
    /// on top of `queue_size`.
    pub tolerance_permille: u64,
}

impl Default for Gradient2Config {
    fn default() -> Self {
        Self {
            initial: 4,
            min: 1,
            max: 1000,
            smoothing_permille: 200,
            queue_size: None,
            long_window: 600,
            tolerance_permille: 1000,
        }
    }
}

/// The headroom an unset `queue_size` gives at limit `limit`: `√L / 2` rounded, at least 1.
///
/// At rest the limit keeps this many requests standing at the upstream, to cover the time
/// between a place given back and the next request let in. Grown with the limit, the
/// share of the workers left queued shrinks as the upstream grows (1 on 4 workers, 8 on
/// 256), while the headroom still outweighs the error of a reference RTT learnt from
/// noisy windows: a fixed 4 is a whole small upstream's worth of queue, and a large one's
/// limit settles below its workers once the reference is a few percent low.
///
/// ```
/// use ratewarden_core::adaptive::auto_queue;
/// assert_eq!((auto_queue(4), auto_queue(20), auto_queue(260)), (1, 2, 8));
/// ```
pub fn auto_queue(limit: u64) -> u64 {
    ((limit as f64).sqrt() / 2.0).round().max(1.0) as u64
}

/// A slow-start window's gradient below this ends the slow start: the short RTT, less
/// twice its standard error, rose by a ninth over the reference, so the upstream is
/// queueing (a rise of a window's noise alone is not a queue).
const SLOW_START_EXIT: f64 = 0.9;

/// Windows in a row that used the limit with the short RTT at or under the reference
/// (gradient 1) before the slow start begins again: the upstream has room the limit does
/// not give it (it grew, or the slow start ended on noise), and the smoothed headroom alone
/// would take minutes to find it. At rest the short RTT sits above the reference by the
/// standing queue, so three such windows by chance alone are rare, and a doubling too far
/// is taken back by the next window.
const CALM_WINDOWS: u32 = 3;

/// How much a window's RTT counts in the warm-up's average: the inverse of its variance
/// (its standard error squared, and a microsecond squared so that windows without noise
/// count alike).
fn precision(rtt_error_ns: u64) -> f64 {
    let e = rtt_error_ns as f64;
    1.0 / (e * e + 1e6)
}

/// Windows averaged, each by its precision, before the long RTT becomes an exponential
/// average (Netflix's warm-up averages them plainly).
const WARMUP: u64 = 10;

/// Gradient2.
///
/// Each window: `long` is the exponential average of the windows' RTTs (weight
/// `2 / (long_window + 1)`; for the first ten, their average weighted by each one's
/// precision, the inverse of its standard error squared), except that a window the limit shaped (it used the limit, `in_flight ≥ L / 2`,
/// above `min`, and outside a slow start that saw no queue) teaches no rise, and a fall
/// only beyond twice its standard error: `long` is the upstream's no-load RTT, not one the
/// limit's own queue shaped nor the luckiest of the windows' noise. If `long / short > 2`
/// the average is cut by 5 % (the upstream recovered, and should not wait 600 windows to
/// be believed).
///
/// The limit starts in slow start: while a used window's RTT, less twice its standard
/// error, stays within a ninth of `long`, the limit doubles what the window used (the first
/// window too, as TCP's first round trip: it has only itself to compare). The first window over that leaves it, the limit going at once
/// to `in_flight · gradient + queue`, what Little's law says was being served plus the
/// headroom; three used windows in a row at gradient 1 start it again. Outside it, when
/// the limit was used: `gradient = clamp(tolerance · long / short, 0.5, 1)`,
/// `new = L · gradient + queue`, `L = clamp(L · (1 − smoothing) + new · smoothing, min,
/// max)`. The limit reported is `⌊L⌋`. At rest `L · (1 − tolerance · long / short) =
/// queue`: with the default tolerance of 1, Little's law reads `L · (1 − long / short)` as
/// the requests queued at the upstream, so the limit keeps `queue` of them standing (the
/// upstream never starves) and no more, whatever the upstream's size.
///
/// Netflix's version ignores drops; here a window with a drop takes the lowest gradient,
/// 0.5, and no queue (and ends a slow start): a timed-out request's RTT is the timeout,
/// the long average learns it, and under constant timeouts the limit would otherwise climb
/// `+queue` per window to the max.
///
/// # Examples
///
/// ```
/// use ratewarden_core::adaptive::{Aggregate, Gradient2, Gradient2Config, WindowUpdate};
///
/// let mut g = Gradient2::new(Gradient2Config::default());
/// let at = |in_flight| Aggregate { rtt_ns: 10_000_000, rtt_error_ns: 0, max_in_flight: in_flight, dropped: false };
/// // No queue: the slow start doubles what each window used.
/// assert_eq!(g.update(at(4)), 8);
/// assert_eq!(g.update(at(8)), 16);
/// ```
#[derive(Debug, Clone)]
pub struct Gradient2 {
    config: Gradient2Config,
    limit: f64,
    long: f64,
    windows: u64,
    /// The warm-up's weights learnt so far (see `precision`).
    weights: f64,
    /// Until the first window that shows queueing (or a drop), a used limit doubles.
    slow_start: bool,
    /// Windows in a row at gradient 1 (see `CALM_WINDOWS`).
    calm: u32,
}

impl Gradient2 {
    /// A controller at `config.initial`.
    pub fn new(config: Gradient2Config) -> Self {
        Self {
            limit: config.initial.clamp(config.min, config.max) as f64,
            config,
            long: 0.0,
            windows: 0,
            weights: 0.0,
            slow_start: true,
            calm: 0,
        }
    }

    /// The limit before rounding down.
    pub fn estimate(&self) -> f64 {
        self.limit
    }

    /// The long RTT average, in nanoseconds.
    pub fn long_rtt(&self) -> f64 {
        self.long
    }
}

impl WindowUpdate for Gradient2 {
    fn update(&mut self, w: Aggregate) -> u64 {
        let c = &self.config;
        let short = w.rtt_ns.max(1) as f64;
        self.windows += 1;
        let tolerance = c.tolerance_permille as f64 / 1000.0;
        let noise = 2.0 * w.rtt_error_ns as f64;
        let used = w.max_in_flight as f64 >= self.limit / 2.0;
        // The first window has only itself to compare. A doubling's queue is read against
        // the reference itself, not `tolerance` times it: the queue a tolerance allows is
        // one the limit may keep, not one a doubling may overshoot into.
        let reference = if self.windows == 1 { short } else { self.long };
        let rose = reference / (short - noise).max(1.0) < SLOW_START_EXIT;
        // What the reference learns: the first window; any window the limit's own queue did
        // not shape (one that did not use the limit, one at the floor, one of a slow start
        // that saw no queue), whose RTT is the upstream's own; and from a shaped window only
        // a fall beyond twice its standard error. A shaped window's rise is the queue the
        // limit let build, and learning it would drag the limit up after it; taking its
        // every fall would sink the reference through the windows' noise to their lowest.
        let unshaped = !used || self.limit <= c.min as f64 || (self.slow_start && !rose);
        let learnt = self.windows == 1 || unshaped || short + noise < self.long;
        self.long = if !learnt {
            self.long
        } else if self.windows <= WARMUP {
            // Weighted by each window's precision: a slow start's first windows hold few
            // samples, and a plain average would give their noise the weight of a window
            // of hundreds.
            let weight = precision(w.rtt_error_ns);
            self.weights += weight;
            self.long + (short - self.long) * weight / self.weights
        } else {
            let factor = 2.0 / (c.long_window as f64 + 1.0);
            self.long * (1.0 - factor) + short * factor
        };
        let long = self.long;
        if long / short > 2.0 {
            self.long *= 0.95;
        }
        let smoothing = c.smoothing_permille as f64 / 1000.0;
        let queue = c.queue_size.unwrap_or_else(|| auto_queue(self.limit())) as f64;
        let new = if w.dropped {
            self.slow_start = false;
            self.calm = 0;
            self.limit * 0.5
        } else if !used {
            // Not using the limit: no evidence it could be higher.
            return self.limit();
        } else {
            let gradient = (tolerance * long / short).clamp(0.5, 1.0);
            // Calm is no queue at all, whatever the tolerance allows: at rest a tolerance
            // keeps the short RTT above the reference by that share.
            self.calm = if long >= short { self.calm + 1 } else { 0 };
            if !self.slow_start && self.calm >= CALM_WINDOWS {
                self.slow_start = true;
                self.calm = 0;
            }
            if self.slow_start && !rose {
                // No queue yet: double what the window used, as TCP's slow start does.
                self.limit = (2.0 * w.max_in_flight as f64)
                    .max(self.limit)
                    .min(c.max as f64);
                return self.limit();
            }
            if self.slow_start {
                // The first queue: by Little's law `in_flight · long / short` were being
                // served, and the limit goes there at once, as TCP halves on leaving slow
                // start, rather than by a tenth a window.
                self.slow_start = false;
                let at = (w.max_in_flight as f64).min(self.limit) * gradient + queue;
                self.limit = at.clamp(c.min as f64, c.max as f64);
                return self.limit();
            }
            self.limit * gradient + queue
        };
        let next = self.limit * (1.0 - smoothing) + new * smoothing;
        self.limit = next.clamp(c.min as f64, c.max as f64);
        self.limit()
    }

    fn limit(&self) -> u64 {
        // Within [min, max] of u64s: the cast only drops the fraction.
        self.limit as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(ms: u64, max_in_flight: u64, dropped: bool) -> Aggregate {
        Aggregate {
            rtt_error_ns: 0,
            rtt_ns: ms * 1_000_000,
            max_in_flight,
            dropped,
        }
    }

    /// A controller from `initial`, with min 10, a fixed queue of 4 and `max`.
    fn from(initial: u64, max: u64) -> Gradient2 {
        Gradient2::new(Gradient2Config {
            initial,
            min: 10,
            max,
            queue_size: Some(4),
            ..Gradient2Config::default()
        })
    }

    /// Worked by hand from the formula, with min 10, max 200, a queue of 4, from 100.
    #[test]
    fn hand_worked_vector() {
        let mut g = from(100, 200);
        // Window 1 sets long = 10 ms; no queue against it, slow start: twice what it
        // used, 200.
        assert_eq!(g.update(w(10, 100, false)), 200);
        // Window 2: short 20 ms in a full window, a rise the limit shaped (long stays 10
        // ms), gradient 0.5 < 0.9: the slow start ends at 200 · 0.5 + 4 = 104.
        assert_eq!(g.update(w(20, 200, false)), 104);
        // Window 3: short 8 ms, a fall beyond the (zero) noise, learnt by the warm-up's
        // average, the windows without noise weighing alike: long = (10 + 8) / 2 = 9 ms.
        // gradient = 9/8 → 1: new = 108, L = 0.8 · 104 + 0.2 · 108 = 104.8.
        assert_eq!(g.update(w(8, 104, false)), 104);
        assert!((g.estimate() - 104.8).abs() < 1e-9);
        assert!((g.long_rtt() - 9_000_000.0).abs() < 1e-3);
        // Window 4, app-limited (40 < 104.8/2): long learns its rise, to (10 + 8 + 10) / 3
        // = 9.33 ms; the limit does not move.
        assert_eq!(g.update(w(10, 40, false)), 104);
        assert!((g.long_rtt() - 28_000_000.0 / 3.0).abs() < 1e-3);
        // Window 5, a drop: new = 52.4, L = 83.84 + 10.48 = 94.32.
        assert_eq!(g.update(w(10, 104, true)), 94);
        assert!((g.estimate() - 94.32).abs() < 1e-9);
    }

    #[test]
    fn a_shaped_fall_within_the_windows_noise_leaves_the_reference() {
        let mut g = from(100, 200);
        // Every window with a standard error of 1 ms.
        let noisy = |ms, in_flight| Aggregate {
            rtt_error_ns: 1_000_000,
            ..w(ms, in_flight, false)
        };
        g.update(noisy(10, 100));
        g.update(noisy(20, 200));
        // 9 ms: within twice the error of 10 ms, noise.
        g.update(noisy(9, 104));
        assert!((g.long_rtt() - 10_000_000.0).abs() < 1e-3);
        // 6 ms: beyond it, learnt, as precise as the first: (10 + 6) / 2 = 8 ms.
        g.update(noisy(6, 104));
        assert!((g.long_rtt() - 8_000_000.0).abs() < 1.0);
    }

    #[test]
    fn the_warm_up_weighs_a_window_by_its_precision() {
        let mut g = from(100, 200);
        // Two windows that did not use the limit, so both are learnt: 10 ms to within
        // 0.1 ms, then 20 ms to within 10 ms. Weighed alike the reference would be 15 ms;
        // by precision (10^4 to 1) it stays within a microsecond and a half of 10 ms.
        let idle = |ms, error_ns| Aggregate {
            rtt_error_ns: error_ns,
            ..w(ms, 1, false)
        };
        g.update(idle(10, 100_000));
        g.update(idle(20, 10_000_000));
        assert!(
            (g.long_rtt() - 10_000_000.0).abs() < 1_500.0,
            "{}",
            g.long_rtt()
        );
    }

    #[test]
    fn three_windows_at_gradient_one_start_the_doubling_again() {
        let mut g = from(50, 1000);
        // The first window doubles; the next ends the slow start on a queue: 100 · 0.5 +
        // 4 = 54.
        assert_eq!(g.update(w(10, 50, false)), 100);
        assert_eq!(g.update(w(20, 100, false)), 54);
        // Two calm windows grow the limit by the smoothed headroom only...
        let calm = |g: &mut Gradient2| {
            let l = g.limit();
            g.update(w(10, l, false))
        };
        assert_eq!(calm(&mut g), 54);
        assert_eq!(calm(&mut g), 55);
        // ...the third starts the slow start, and the next doubles what it used.
        calm(&mut g);
        let used = g.limit();
        assert_eq!(calm(&mut g), 2 * used);
    }

    #[test]
    fn a_long_average_far_above_the_short_rtt_decays() {
        let mut g = Gradient2::new(Gradient2Config::default());
        for _ in 0..10 {
            g.update(w(100, 0, false));
        }
        // Long 100 ms, then a 10 ms window: long = 100·599/601 + 10·2/601 ≈ 99.70 ms,
        // over twice the short RTT, so it is cut by 5 %: ≈ 94.72 ms.
        g.update(w(10, 0, false));
        let expected = (100e6 * 599.0 / 601.0 + 10e6 * 2.0 / 601.0) * 0.95;
        assert!((g.long_rtt() - expected).abs() < 1.0);
    }
}
