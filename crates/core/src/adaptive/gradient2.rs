//! Gradient2 (Netflix's recommended controller): the short RTT against a slow average of
//! it, so that the limit follows an upstream whose normal latency drifts.

use super::window::{Aggregate, WindowUpdate};

/// Gradient2's parameters (Netflix's defaults, but for the tolerance: 20 initial, [20, 200],
/// smoothing 0.2, queue 4, long window 600; tolerance 1, where Netflix's is 1.5).
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
    /// The headroom added each window, in requests.
    pub queue_size: u64,
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
            initial: 20,
            min: 20,
            max: 200,
            smoothing_permille: 200,
            queue_size: 4,
            long_window: 600,
            tolerance_permille: 1000,
        }
    }
}

/// Windows averaged plainly before the long RTT becomes an exponential average (Netflix's
/// warm-up).
const WARMUP: u64 = 10;

/// Gradient2.
///
/// Each window: `long` is the exponential average of the windows' RTTs (weight
/// `2 / (long_window + 1)`, a plain average for the first ten, the first window taken as
/// it is), except that a window's RTT above `long` is learnt only if the window did not
/// use the limit (`in_flight < L / 2`) or the limit is at `min`: `long` is the upstream's
/// no-load RTT, not one the limit's own queue shaped. If `long / short > 2` the
/// average is cut by 5 % (the upstream recovered, and should not wait 600 windows to be
/// believed). When the limit was used (`in_flight ≥ L / 2`):
/// `gradient = clamp(tolerance · long / short, 0.5, 1)`, `new = L · gradient + queue`,
/// `L = clamp(L · (1 − smoothing) + new · smoothing, min, max)`. The limit reported is
/// `⌊L⌋`. At rest `L · (1 − tolerance · long / short) = queue`: with the default tolerance
/// of 1, Little's law reads `L · (1 − long / short)` as the requests queued at the
/// upstream, so the limit keeps `queue` of them standing (the upstream never starves) and
/// no more, whatever the upstream's size.
///
/// Netflix's version ignores drops; here a window with a drop takes the lowest gradient,
/// 0.5, and no queue: a timed-out request's RTT is the timeout, the long average learns it,
/// and under constant timeouts the limit would otherwise climb `+queue` per window to the
/// max.
///
/// # Examples
///
/// ```
/// use ratewarden_core::adaptive::{Aggregate, Gradient2, Gradient2Config, WindowUpdate};
///
/// let mut g = Gradient2::new(Gradient2Config::default());
/// let w = Aggregate { rtt_ns: 10_000_000, max_in_flight: 20, dropped: false };
/// // No queueing: gradient 1, new = 20 + 4, L = 0.8·20 + 0.2·24 = 20.8.
/// assert_eq!(g.update(w), 20);
/// ```
#[derive(Debug, Clone)]
pub struct Gradient2 {
    config: Gradient2Config,
    limit: f64,
    long: f64,
    windows: u64,
}

impl Gradient2 {
    /// A controller at `config.initial`.
    pub fn new(config: Gradient2Config) -> Self {
        Self {
            limit: config.initial.clamp(config.min, config.max) as f64,
            config,
            long: 0.0,
            windows: 0,
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
        // Whether this window's RTT may raise the reference: only if the limit's own queue
        // did not shape it. Under sustained overload every window is full, its RTT is the
        // queue the limit lets build, and learning it drags the reference up, the limit
        // after it (`tolerance` above a reference that follows), and so on for as long as
        // the overload lasts (docs/adaptive.md has the figures). A window
        // that did not use the limit, or one at the lowest limit, shows the upstream's own
        // latency: a service slower for good is believed from those.
        let unshaped = (w.max_in_flight as f64) < self.limit / 2.0 || self.limit <= c.min as f64;
        // The first window sets the reference; the warm-up then averages plainly, but like
        // every later window it learns a rise only from a window the limit did not shape:
        // an initial limit above the upstream's workers queues from the start, and a
        // reference that learnt that queue would keep it standing for good.
        self.long = if self.windows == 1 {
            short
        } else if short > self.long && !unshaped {
            self.long
        } else if self.windows <= WARMUP {
            self.long + (short - self.long) / self.windows as f64
        } else {
            let factor = 2.0 / (c.long_window as f64 + 1.0);
            self.long * (1.0 - factor) + short * factor
        };
        let long = self.long;
        if long / short > 2.0 {
            self.long *= 0.95;
        }
        let smoothing = c.smoothing_permille as f64 / 1000.0;
        let new = if w.dropped {
            self.limit * 0.5
        } else if (w.max_in_flight as f64) < self.limit / 2.0 {
            // Not using the limit: no evidence it could be higher.
            return self.limit();
        } else {
            let tolerance = c.tolerance_permille as f64 / 1000.0;
            let gradient = (tolerance * long / short).clamp(0.5, 1.0);
            self.limit * gradient + c.queue_size as f64
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
            rtt_ns: ms * 1_000_000,
            max_in_flight,
            dropped,
        }
    }

    /// Worked by hand from the formula, with min 10, max 200, from 100.
    #[test]
    fn hand_worked_vector() {
        let mut g = Gradient2::new(Gradient2Config {
            initial: 100,
            min: 10,
            ..Gradient2Config::default()
        });
        // Window 1: long = 10 ms. gradient = clamp(10/10, ·, 1) = 1, new = 104,
        // L = 80 + 20.8 = 100.8.
        assert_eq!(g.update(w(10, 100, false)), 100);
        assert!((g.estimate() - 100.8).abs() < 1e-9);
        // Window 2: short 20 ms in a full window: a rise the limit shaped, so long stays
        // 10 ms. gradient = 10/20 = 0.5: new = 50.4 + 4 = 54.4, L = 80.64 + 10.88 = 91.52.
        assert_eq!(g.update(w(20, 100, false)), 91);
        assert!((g.estimate() - 91.52).abs() < 1e-9);
        // Window 3: short 8 ms, a fall, learnt by the warm-up's plain average: long = 10 +
        // (8 − 10)/3 = 9.33 ms. gradient = 9.33/8 → 1: new = 95.52, L = 73.216 + 19.104
        // = 92.32.
        assert_eq!(g.update(w(8, 91, false)), 92);
        assert!((g.estimate() - 92.32).abs() < 1e-9);
        // Window 4, app-limited (40 < 92.32/2): long learns its rise, to 9.33 + (10 −
        // 9.33)/4 = 9.5 ms; the limit does not move.
        assert_eq!(g.update(w(10, 40, false)), 92);
        assert!((g.long_rtt() - 9_500_000.0).abs() < 1e-3);
        // Window 5, a drop: new = 46.16, L = 73.856 + 9.232 = 83.088.
        assert_eq!(g.update(w(10, 92, true)), 83);
        assert!((g.estimate() - 83.088).abs() < 1e-9);
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
