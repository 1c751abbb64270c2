//! Vegas (Netflix's, after TCP Vegas): estimate the queue from how far the RTT is above
//! the no-load RTT, and step the limit by log10 of itself.

use super::window::{Aggregate, WindowUpdate};
use super::{log10_floor1, Jitter};

/// Vegas's parameters (Netflix's defaults: 20 initial, max 1000, probe every ~30·L windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VegasConfig {
    /// The limit to start from.
    pub initial: u64,
    /// The lowest limit (Netflix's floor is 1).
    pub min: u64,
    /// The highest limit.
    pub max: u64,
    /// `rtt_noload` is measured again after about `probe_multiplier · L` windows.
    pub probe_multiplier: u64,
}

impl Default for VegasConfig {
    fn default() -> Self {
        Self {
            initial: 20,
            min: 1,
            max: 1000,
            probe_multiplier: 30,
        }
    }
}

/// Vegas on integers (Netflix's smoothing 1.0, that is none).
///
/// With `lg = max(1, ⌊log10 L⌋)`: `α = 3·lg`, `β = 6·lg`, threshold `lg`, and
/// `queue = ⌈L · (1 − rtt_noload / rtt)⌉`. A drop: `L − lg`. Otherwise, when the limit was
/// used (`in_flight · 2 ≥ L`): `queue ≤ lg` → `L + β`; `queue < α` → `L + lg`;
/// `queue > β` → `L − lg`; else unchanged. The lowest window RTT seen is `rtt_noload`; it
/// is taken afresh after `probe_multiplier · L · U[0.5, 1)` windows, so a route that got
/// slower for good is not read as a queue forever, but only from a window that did not
/// use the limit or sat at `min` (Netflix's probes any window, and under sustained load
/// reads a loaded RTT as the no-load one).
///
/// # Examples
///
/// ```
/// use ratewarden_core::adaptive::{Aggregate, Vegas, VegasConfig, WindowUpdate};
///
/// let mut vegas = Vegas::new(VegasConfig::default(), 1);
/// let at = |rtt_ns| Aggregate { rtt_ns, rtt_error_ns: 0, max_in_flight: 20, dropped: false };
/// assert_eq!(vegas.update(at(10_000_000)), 20); // the first window sets rtt_noload
/// assert_eq!(vegas.update(at(10_000_000)), 26); // no queue: + β = 6
/// ```
#[derive(Debug, Clone)]
pub struct Vegas {
    config: VegasConfig,
    limit: u64,
    rtt_noload: u64,
    probe_count: u64,
    /// The probe's jitter, in thousandths, in `[500, 1000)`.
    probe_jitter: u64,
    jitter: Jitter,
}

impl Vegas {
    /// A controller at `config.initial`; `seed` drives the probe jitter.
    pub fn new(config: VegasConfig, seed: u64) -> Self {
        let mut jitter = Jitter::new(seed);
        let probe_jitter = 500 + jitter.below(500);
        Self {
            limit: config.initial.clamp(config.min.max(1), config.max),
            config,
            rtt_noload: 0,
            probe_count: 0,
            probe_jitter,
            jitter,
        }
    }

    /// The no-load RTT it measures queues against, in nanoseconds (0 before any).
    pub fn rtt_noload(&self) -> u64 {
        self.rtt_noload
    }
}

impl WindowUpdate for Vegas {
    fn update(&mut self, w: Aggregate) -> u64 {
        let l = self.limit;
        self.probe_count += 1;
        // probe_count ≥ jitter · multiplier · L, the jitter in thousandths.
        let due = u128::from(self.probe_jitter)
            * u128::from(self.config.probe_multiplier)
            * u128::from(l);
        // A probe reads this window's RTT as the no-load one, so only a window the limit's
        // own queue did not shape may serve: one that did not use the limit, or one at the
        // lowest limit. Under sustained overload every window is full, the "no-load" RTT a
        // probe read there was a loaded one, and each probe ratcheted the limit up (Uber's
        // drifting target; docs/adaptive.md has the figures).
        // The probe waits, still due, until such a window comes.
        let unshaped = w.max_in_flight.saturating_mul(2) < l || l <= self.config.min.max(1);
        if u128::from(self.probe_count) * 1000 >= due && unshaped {
            self.probe_jitter = 500 + self.jitter.below(500);
            self.probe_count = 0;
            self.rtt_noload = w.rtt_ns;
            return l;
        }
        if self.rtt_noload == 0 || w.rtt_ns < self.rtt_noload {
            self.rtt_noload = w.rtt_ns;
            return l;
        }
        let rtt = u128::from(w.rtt_ns.max(1));
        // ⌈L · (rtt − noload) / rtt⌉, exactly.
        let queue = (u128::from(l) * (rtt - u128::from(self.rtt_noload))).div_ceil(rtt);
        let queue = u64::try_from(queue).unwrap_or(u64::MAX);
        let lg = log10_floor1(l);
        let next = if w.dropped {
            l.saturating_sub(lg)
        } else if w.max_in_flight.saturating_mul(2) < l {
            // Not using the limit: no evidence it could be higher.
            return l;
        } else if queue <= lg {
            l + 6 * lg
        } else if queue < 3 * lg {
            l + lg
        } else if queue > 6 * lg {
            l.saturating_sub(lg)
        } else {
            return l;
        };
        self.limit = next.clamp(self.config.min.max(1), self.config.max);
        self.limit
    }

    fn limit(&self) -> u64 {
        self.limit
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

    /// Worked by hand from the formula, from L = 100 (lg = 2, α = 6, β = 12).
    #[test]
    fn hand_worked_vector() {
        let mut v = Vegas::new(
            VegasConfig {
                initial: 100,
                probe_multiplier: 1_000_000,
                ..VegasConfig::default()
            },
            7,
        );
        // Sets rtt_noload = 10 ms.
        assert_eq!(v.update(w(10, 100, false)), 100);
        // rtt 10.1 ms: queue = ⌈100 · 0.1/10.1⌉ = ⌈0.99⌉ = 1 ≤ 2: + β = 112.
        assert_eq!(
            v.update(Aggregate {
                rtt_error_ns: 0,
                rtt_ns: 10_100_000,
                max_in_flight: 100,
                dropped: false
            }),
            112
        );
        // L = 112, lg = 2. rtt 10.3 ms: queue = ⌈112 · 0.3/10.3⌉ = ⌈3.26⌉ = 4 < 6: + 2.
        assert_eq!(
            v.update(Aggregate {
                rtt_error_ns: 0,
                rtt_ns: 10_300_000,
                max_in_flight: 112,
                dropped: false
            }),
            114
        );
        // rtt 11 ms: queue = ⌈114 · 1/11⌉ = ⌈10.36⌉ = 11, in [6, 12]: unchanged.
        assert_eq!(v.update(w(11, 114, false)), 114);
        // rtt 20 ms: queue = ⌈114 · 10/20⌉ = 57 > 12: − 2.
        assert_eq!(v.update(w(20, 114, false)), 112);
        // A drop: − lg.
        assert_eq!(v.update(w(10, 112, true)), 110);
        // App-limited (54·2 < 110): unchanged, even with no queue.
        assert_eq!(v.update(w(10, 54, false)), 110);
        assert_eq!(v.rtt_noload(), 10_000_000);
    }

    #[test]
    fn the_no_load_rtt_is_probed_again_after_about_multiplier_times_limit_windows() {
        let mut v = Vegas::new(
            VegasConfig {
                initial: 10,
                max: 10,
                probe_multiplier: 2,
                ..VegasConfig::default()
            },
            3,
        );
        v.update(w(10, 10, false));
        // The route got slower for good: within 2·10 windows that do not use the limit
        // (4 in flight of 10, so the limit is not what queues) the no-load RTT follows.
        for _ in 0..20 {
            v.update(w(30, 4, false));
        }
        assert_eq!(v.rtt_noload(), 30_000_000);
    }

    #[test]
    fn a_probe_waits_for_a_window_the_limit_did_not_shape() {
        let mut v = Vegas::new(
            VegasConfig {
                initial: 10,
                min: 2,
                max: 10,
                probe_multiplier: 2,
            },
            3,
        );
        v.update(w(10, 10, false));
        // Full windows, their RTT the queue the limit let build: a probe among them would
        // read a loaded RTT as the no-load one. It is due, and waits.
        for _ in 0..40 {
            v.update(w(30, v.limit(), false));
        }
        assert_eq!(v.rtt_noload(), 10_000_000);
        // The first window that does not use the limit serves it.
        v.update(w(12, 1, false));
        assert_eq!(v.rtt_noload(), 12_000_000);
    }
}
