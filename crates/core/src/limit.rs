//! Any algorithm behind one type, for code that picks the algorithm at run time.

use std::fmt;
use std::str::FromStr;

use crate::algorithm::{
    ConcurrencyState, FixedWindowState, GcraState, HeapSize, LeakyBucketState, LeakyQueueState,
    QuotaState, SlidingLogState, SlidingWindowState, TokenBucketState,
};
use crate::{
    Algorithm, Concurrency, Decision, Error, FixedWindow, Gcra, LeakyBucket, LeakyQueue, Quota,
    SlidingLog, SlidingWindow, TokenBucket,
};

/// The algorithms by name, as written in config files and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlgorithmKind {
    /// `fixed-window`: [`FixedWindow`].
    FixedWindow,
    /// `sliding-log`: [`SlidingLog`].
    SlidingLog,
    /// `sliding-window`: [`SlidingWindow`].
    SlidingWindow,
    /// `token-bucket`: [`TokenBucket`].
    TokenBucket,
    /// `leaky-bucket`: [`LeakyBucket`], the meter.
    LeakyBucket,
    /// `leaky-queue`: [`LeakyQueue`].
    LeakyQueue,
    /// `gcra`: [`Gcra`].
    Gcra,
    /// `quota`: [`Quota`].
    Quota,
    /// `concurrency`: [`Concurrency`].
    Concurrency,
}

impl AlgorithmKind {
    /// Every algorithm, in the order the lesson presents them.
    pub const ALL: [AlgorithmKind; 9] = [
        Self::FixedWindow,
        Self::SlidingLog,
        Self::SlidingWindow,
        Self::TokenBucket,
        Self::LeakyBucket,
        Self::LeakyQueue,
        Self::Gcra,
        Self::Quota,
        Self::Concurrency,
    ];

    /// The algorithm's name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed-window",
            Self::SlidingLog => "sliding-log",
            Self::SlidingWindow => "sliding-window",
            Self::TokenBucket => "token-bucket",
            Self::LeakyBucket => "leaky-bucket",
            Self::LeakyQueue => "leaky-queue",
            Self::Gcra => "gcra",
            Self::Quota => "quota",
            Self::Concurrency => "concurrency",
        }
    }

    /// Whether the algorithm takes a rate and a burst (rather than a limit and a window).
    pub fn is_bucket(&self) -> bool {
        matches!(
            self,
            Self::TokenBucket | Self::LeakyBucket | Self::LeakyQueue | Self::Gcra
        )
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AlgorithmKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == wanted)
            .ok_or_else(|| Error::UnknownAlgorithm {
                name: s.to_owned(),
                known: Self::ALL.map(|k| k.as_str()).join(", "),
            })
    }
}

macro_rules! any_limit {
    ($($variant:ident($algo:ty, $state:ty)),* $(,)?) => {
        /// A validated limit of any algorithm.
        ///
        /// # Examples
        ///
        /// ```
        /// use ratewarden_core::{Algorithm, Gcra, Limit, Rate};
        ///
        /// let limit = Limit::from(Gcra::new(Rate::per_second(5)?, 5)?);
        /// let mut state = Default::default();
        /// assert!(limit.decide(&mut state, 0, 5).is_allowed());
        /// assert!(!limit.decide(&mut state, 0, 1).is_allowed());
        /// # Ok::<(), ratewarden_core::Error>(())
        /// ```
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Limit {
            $(
                #[doc = concat!("A [`", stringify!($variant), "`] limit.")]
                $variant($algo),
            )*
        }

        /// The state of a key under any [`Limit`]. The default is a key never seen.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub enum LimitState {
            /// A key never seen.
            #[default]
            Fresh,
            $(
                #[doc = concat!("State under a [`", stringify!($variant), "`] limit.")]
                $variant($state),
            )*
        }

        impl HeapSize for LimitState {
            fn heap_bytes(&self) -> usize {
                match self {
                    LimitState::Fresh => 0,
                    $(LimitState::$variant(s) => s.heap_bytes(),)*
                }
            }
        }

        $(
            impl From<$algo> for Limit {
                fn from(algorithm: $algo) -> Self {
                    Limit::$variant(algorithm)
                }
            }
        )*

        impl Limit {
            /// Which algorithm this is.
            pub fn kind(&self) -> AlgorithmKind {
                match self {
                    $(Limit::$variant(_) => AlgorithmKind::$variant,)*
                }
            }
        }

        impl Algorithm for Limit {
            type State = LimitState;

            fn decide(&self, state: &mut LimitState, now: u64, cost: u64) -> Decision {
                match (self, &mut *state) {
                    $((Limit::$variant(a), LimitState::$variant(s)) => a.decide(s, now, cost),)*
                    // A key never seen, or a state of another algorithm (the limit changed):
                    // start afresh, and keep the new state only if something was charged.
                    $((Limit::$variant(a), _) => {
                        let mut fresh = Default::default();
                        let decision = a.decide(&mut fresh, now, cost);
                        if decision.is_allowed() {
                            *state = LimitState::$variant(fresh);
                        }
                        decision
                    })*
                }
            }

            fn peek(&self, state: &LimitState, now: u64, cost: u64) -> Decision {
                match (self, state) {
                    $((Limit::$variant(a), LimitState::$variant(s)) => a.peek(s, now, cost),)*
                    $((Limit::$variant(a), _) => a.peek(&Default::default(), now, cost),)*
                }
            }

            fn settle(&self, state: &mut LimitState, now: u64, delta: i64) {
                match self {
                    $(Limit::$variant(a) => {
                        if !matches!(state, LimitState::$variant(_)) {
                            *state = LimitState::$variant(Default::default());
                        }
                        let LimitState::$variant(s) = state else { unreachable!() };
                        a.settle(s, now, delta)
                    })*
                }
            }

            fn is_fresh(&self, state: &LimitState, now: u64) -> bool {
                match (self, state) {
                    (_, LimitState::Fresh) => true,
                    $((Limit::$variant(a), LimitState::$variant(s)) => a.is_fresh(s, now),)*
                    // State of another algorithm is discarded on next use.
                    _ => true,
                }
            }

            fn limit(&self) -> u64 {
                match self {
                    $(Limit::$variant(a) => a.limit(),)*
                }
            }
        }
    };
}

any_limit! {
    FixedWindow(FixedWindow, FixedWindowState),
    SlidingLog(SlidingLog, SlidingLogState),
    SlidingWindow(SlidingWindow, SlidingWindowState),
    TokenBucket(TokenBucket, TokenBucketState),
    LeakyBucket(LeakyBucket, LeakyBucketState),
    LeakyQueue(LeakyQueue, LeakyQueueState),
    Gcra(Gcra, GcraState),
    Quota(Quota, QuotaState),
    Concurrency(Concurrency, ConcurrencyState),
}

impl Limit {
    /// Takes a concurrency permit `id` of `cost` units. Under any other algorithm this is a
    /// plain [`decide`](Algorithm::decide): there is no permit to hold.
    pub fn acquire(&self, state: &mut LimitState, now: u64, cost: u64, id: u64) -> Decision {
        let Limit::Concurrency(limit) = self else {
            return self.decide(state, now, cost);
        };
        if !matches!(state, LimitState::Concurrency(_)) {
            *state = LimitState::Concurrency(ConcurrencyState::default());
        }
        let LimitState::Concurrency(held) = state else {
            unreachable!("just set")
        };
        limit.acquire(held, now, cost, id)
    }

    /// Gives back permit `id`; false if it was not held, or this is not a concurrency limit.
    pub fn release(&self, state: &mut LimitState, id: u64) -> bool {
        match (self, state) {
            (Limit::Concurrency(limit), LimitState::Concurrency(held)) => limit.release(held, id),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store keeps one `LimitState` per key: with the key and its expiry it must fit a
    /// 64-byte cache line.
    #[test]
    fn every_state_fits_a_store_slot() {
        assert!(
            std::mem::size_of::<LimitState>() <= 32,
            "{}",
            std::mem::size_of::<LimitState>()
        );
        assert_eq!(std::mem::align_of::<LimitState>(), 8);
    }
}
