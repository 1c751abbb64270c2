//! A strategy and its window, as configured: plain integers, so a rule compares exactly.

use super::{
    Aimd, AimdConfig, Controller, Gradient, Gradient2, Gradient2Config, GradientConfig, Vegas,
    VegasConfig, Windowed,
};

/// When a windowed controller updates: 10 samples, 100 ms (Netflix's `WindowedLimit` takes
/// 1 s, which holds a limit that must grow a hundredfold to a minute of overload), RTTs
/// under 100 µs ignored. Gradient2's window also lasts at least the last one's average
/// RTT ([`Windowed::round_trips`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowConfig {
    /// Samples a window needs before it updates the limit.
    pub min_samples: u32,
    /// The shortest window, in nanoseconds.
    pub min_time_ns: u64,
    /// RTTs below this are ignored (nanoseconds).
    pub min_rtt_ns: u64,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self {
            min_samples: 10,
            min_time_ns: 100_000_000,
            min_rtt_ns: 100_000,
        }
    }
}

/// Which controller, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Additive increase, multiplicative decrease on drops and timeouts.
    Aimd(AimdConfig),
    /// Netflix's Vegas: the estimated queue against log10 thresholds.
    Vegas(VegasConfig),
    /// Netflix's Gradient2: the short RTT against a slow average.
    Gradient2(Gradient2Config),
    /// Envoy's gradient controller: a percentile against a periodically re-measured min RTT.
    Gradient(GradientConfig),
}

impl Strategy {
    /// The name used in config files.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Aimd(_) => "aimd",
            Strategy::Vegas(_) => "vegas",
            Strategy::Gradient2(_) => "gradient2",
            Strategy::Gradient(_) => "gradient",
        }
    }

    /// The most the limit can ever be.
    pub fn max(&self) -> u64 {
        match self {
            Strategy::Aimd(c) => c.max,
            Strategy::Vegas(c) => c.max,
            Strategy::Gradient2(c) => c.max,
            Strategy::Gradient(c) => c.max,
        }
    }

    /// A controller in its initial state, its first window (or min-RTT measurement)
    /// starting at `now`; `seed` drives the jitter of re-probes.
    pub fn build(&self, window: WindowConfig, now: u64, seed: u64) -> Box<dyn Controller> {
        match *self {
            Strategy::Aimd(c) => Box::new(Windowed::new(Aimd::new(c), window, now)),
            Strategy::Vegas(c) => Box::new(Windowed::new(Vegas::new(c, seed), window, now)),
            Strategy::Gradient2(c) => {
                Box::new(Windowed::new(Gradient2::new(c), window, now).round_trips())
            }
            Strategy::Gradient(c) => Box::new(Gradient::new(c, window.min_rtt_ns, now, seed)),
        }
    }
}
