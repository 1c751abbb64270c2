//! What the operator's dashboard (`admin::dashboard`) shows beyond the engine's counters,
//! kept by the app below the doors: each rule's counts sampled over the last minutes (for
//! its sparklines), and the last reload's result.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ratewarden_policy::RuleStats;

/// How often the counters are sampled.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Samples kept: ten minutes of them.
const SAMPLES: usize = 120;

/// One sample: when, and every rule's counters then.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) at_ns: u64,
    pub(crate) rules: Vec<(String, RuleStats)>,
}

/// A reload's result, for the dashboard.
#[derive(Debug, Clone)]
pub(crate) struct ReloadRecord {
    pub(crate) at_ns: u64,
    /// The version in force after it (unchanged when it failed).
    pub(crate) version: u64,
    /// Every located error of a refused file (empty when it went through).
    pub(crate) errors: Vec<String>,
    /// Fields changed that only a restart puts in force.
    pub(crate) needing_restart: Vec<&'static str>,
}

/// The operator's view: samples and the last reload.
#[derive(Debug, Default)]
pub(crate) struct Operator {
    samples: Mutex<VecDeque<Sample>>,
    last_reload: Mutex<Option<ReloadRecord>>,
}

impl Operator {
    /// Keeps `sample`, dropping the oldest past [`SAMPLES`].
    pub(crate) fn sampled(&self, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// The samples, oldest first.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples.iter().cloned().collect()
    }

    pub(crate) fn reloaded(&self, record: ReloadRecord) {
        *self
            .last_reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(record);
    }

    pub(crate) fn last_reload(&self) -> Option<ReloadRecord> {
        self.last_reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_bounded_and_oldest_go_first() {
        let operator = Operator::default();
        for i in 0..(SAMPLES as u64 + 7) {
            operator.sampled(Sample {
                at_ns: i,
                rules: Vec::new(),
            });
        }
        let samples = operator.samples();
        assert_eq!(samples.len(), SAMPLES);
        assert_eq!(samples[0].at_ns, 7);
    }
}
