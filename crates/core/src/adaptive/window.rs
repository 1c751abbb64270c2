//! The samples window: controllers that update once per window see the window's average.

use super::{Controller, Sample};

/// What a window of samples hands its controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aggregate {
    /// The average RTT of the window, in nanoseconds (rounded down).
    pub rtt_ns: u64,
    /// The most requests in flight at any sample's start.
    pub max_in_flight: u64,
    /// Whether any sample was dropped.
    pub dropped: bool,
}

/// A controller updated once per window (Netflix's `WindowedLimit`).
pub trait WindowUpdate: std::fmt::Debug + Send {
    /// Updates the limit from one window's aggregate; returns the new limit.
    fn update(&mut self, window: Aggregate) -> u64;
    /// The current limit.
    fn limit(&self) -> u64;
}

/// Wraps a per-window controller: samples under `min_rtt` are ignored (a cache hit or an
/// error page says nothing of the upstream's queue), and the controller is updated once a
/// window holds at least `min_samples` samples and at least `min_time` has passed since the
/// last update (or the start). One sample is noise; a window's average is a measurement.
#[derive(Debug)]
pub struct Windowed<C> {
    inner: C,
    config: super::WindowConfig,
    /// When the window began: the last update, or the start.
    start: u64,
    count: u64,
    sum: u128,
    max_in_flight: u64,
    dropped: bool,
}

impl<C: WindowUpdate> Windowed<C> {
    /// `inner`, updated once per window of `config`, the first window starting at `now`.
    pub fn new(inner: C, config: super::WindowConfig, now: u64) -> Self {
        Self {
            inner,
            config,
            start: now,
            count: 0,
            sum: 0,
            max_in_flight: 0,
            dropped: false,
        }
    }

    /// The controller inside.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C: WindowUpdate> Controller for Windowed<C> {
    fn sample(&mut self, now: u64, sample: Sample) -> u64 {
        // A drop is counted whatever its RTT: a fast 500 is still a failure.
        if sample.rtt_ns < self.config.min_rtt_ns && !sample.dropped {
            return self.inner.limit();
        }
        self.count += 1;
        self.sum += u128::from(sample.rtt_ns);
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        self.dropped |= sample.dropped;
        if self.count < u64::from(self.config.min_samples)
            || now.saturating_sub(self.start) < self.config.min_time_ns
        {
            return self.inner.limit();
        }
        let window = Aggregate {
            rtt_ns: u64::try_from(self.sum / u128::from(self.count)).unwrap_or(u64::MAX),
            max_in_flight: self.max_in_flight,
            dropped: self.dropped,
        };
        self.start = now;
        self.count = 0;
        self.sum = 0;
        self.max_in_flight = 0;
        self.dropped = false;
        self.inner.update(window)
    }

    fn limit(&self) -> u64 {
        self.inner.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Aimd, AimdConfig, WindowConfig};
    use super::*;

    #[test]
    fn a_window_needs_enough_samples_and_enough_time_and_ignores_tiny_rtts() {
        let config = WindowConfig {
            min_samples: 3,
            min_time_ns: 1_000,
            min_rtt_ns: 100,
        };
        let aimd = Aimd::new(AimdConfig {
            initial: 10,
            min: 1,
            max: 100,
            ..AimdConfig::default()
        });
        let mut w = Windowed::new(aimd, config, 0);
        let busy = |rtt| Sample {
            rtt_ns: rtt,
            in_flight: 10,
            dropped: false,
        };
        // Tiny RTTs do not count towards the window.
        for t in 0..10 {
            assert_eq!(w.sample(t, busy(50)), 10);
        }
        assert_eq!(w.sample(0, busy(500)), 10);
        assert_eq!(w.sample(10, busy(500)), 10);
        // Three samples, but only 20 ns of window.
        assert_eq!(w.sample(20, busy(500)), 10);
        // Long enough now: one update, +1.
        assert_eq!(w.sample(1_000, busy(500)), 11);
        // A fresh window starts.
        assert_eq!(w.sample(1_001, busy(500)), 11);
    }
}
