//! Top offenders: per rule, the keys most often limited (and most often would-have-been
//! limited, in shadow), in fixed memory, decayed over time.
//!
//! The summary is Space-Saving (Metwally, Agrawal and El Abbadi, "Efficient Computation of
//! Frequent and Top-k Elements in Data Streams", ICDT 2005): `capacity` slots, each a key, a
//! count and an error. A tracked key's hit adds to its count; an untracked key takes the
//! slot with the smallest count `m`, starting at `m + 1` with error `m`. With `W` the weight
//! of every hit recorded (decayed as the counts are), the summary guarantees:
//!
//! - a tracked key's true weight lies in `[count - error, count]`, and `error <= W / capacity`;
//! - a key not tracked has a true weight of at most `W / capacity`: every key heavier than
//!   that is in the summary.
//!
//! Decay: at every multiple of the half-life, every count, error and `W` is halved, so a
//! hit counts fully until the next half-life boundary, then half, then a quarter. Halving
//! everything alike keeps both guarantees; counts are kept in 1/65,536ths of a hit, so the
//! halvings round nothing away for the first 16 half-lives of a hit's life.
//!
//! Memory is fixed: the slots, their key buffers and the index are allocated once, at the
//! first hit, and a hit on a tracked key allocates nothing (nor does taking over a slot,
//! unless the new key is longer than 128 bytes).

use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

use hashbrown::HashTable;

use super::RuleSet;
use crate::engine::request::STOOD_IN;

/// Slots per summary: each reported count is at most 1% of the rule's recent rejections
/// too high.
pub(crate) const CAPACITY: usize = 100;

/// The half-life of a hit, in nanoseconds: a minute.
pub(crate) const HALF_LIFE_NS: u64 = 60_000_000_000;

/// Bytes reserved for each slot's key up front (a longer key grows its buffer once).
pub(crate) const KEY_ROOM: usize = 128;

/// One hit, in the fixed-point unit counts are kept in.
const ONE: u64 = 1 << 16;

/// A fixed-memory, decayed summary of the keys hit most often (Space-Saving).
///
/// # Examples
///
/// ```
/// use ratewarden_policy::TopKeys;
///
/// let top = TopKeys::new(4, 60_000_000_000);
/// for key in ["a", "b", "a", "c", "a", "b"] {
///     top.record(key, 0);
/// }
/// let report = top.report(0);
/// assert_eq!(report.keys[0].key, "a");
/// assert_eq!(report.keys[0].count, 3.0);
/// assert_eq!(report.total, 6.0);
/// ```
#[derive(Debug)]
pub struct TopKeys {
    capacity: usize,
    half_life_ns: u64,
    inner: Mutex<Summary>,
}

#[derive(Debug)]
struct Summary {
    slots: Vec<Slot>,
    /// Slot indices by their key's hash (the keys live in the slots only).
    index: HashTable<usize>,
    hasher: std::hash::RandomState,
    /// The decayed weight of every hit recorded, in [`ONE`]s.
    total: u64,
    /// The half-life period the counts are decayed to.
    period: u64,
}

#[derive(Debug)]
struct Slot {
    key: String,
    /// The key's hash, kept so that taking the slot over does not hash the old key again.
    hash: u64,
    /// In [`ONE`]s; 0 for a free slot.
    count: u64,
    /// In [`ONE`]s: how much of `count` may belong to the keys it replaced.
    error: u64,
}

/// A summary's keys, heaviest first.
#[derive(Debug, Clone, PartialEq)]
pub struct TopReport {
    /// Up to the summary's capacity, heaviest first.
    pub keys: Vec<Offender>,
    /// The decayed weight of every hit recorded (`W`).
    pub total: f64,
    /// How far any count may be too high, and the most an untracked key can weigh:
    /// `total / capacity`.
    pub error_bound: f64,
}

/// A key and its decayed weight of hits.
#[derive(Debug, Clone, PartialEq)]
pub struct Offender {
    /// The key as stored (API keys as their digest).
    pub key: String,
    /// Its decayed hits (an over-estimate by at most `error`).
    pub count: f64,
    /// How much of `count` may belong to keys it replaced: the true weight is at least
    /// `count - error`.
    pub error: f64,
}

impl TopKeys {
    /// A summary of `capacity` slots whose hits halve every `half_life_ns` nanoseconds.
    ///
    /// # Panics
    ///
    /// If `capacity` or `half_life_ns` is 0.
    pub fn new(capacity: usize, half_life_ns: u64) -> Self {
        assert!(capacity > 0, "a summary needs at least one slot");
        assert!(half_life_ns > 0, "a half-life must be longer than 0");
        Self {
            capacity,
            half_life_ns,
            inner: Mutex::new(Summary {
                slots: Vec::new(),
                index: HashTable::new(),
                hasher: std::hash::RandomState::new(),
                total: 0,
                period: 0,
            }),
        }
    }

    /// Records one hit of `key` at `now` (nanoseconds).
    pub fn record(&self, key: &str, now: u64) {
        let mut summary = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if summary.slots.is_empty() {
            // Once, at the first hit: a rule that never limits costs nothing.
            summary.slots = (0..self.capacity)
                .map(|_| Slot {
                    key: String::with_capacity(KEY_ROOM),
                    hash: 0,
                    count: 0,
                    error: 0,
                })
                .collect();
            summary.index = HashTable::with_capacity(self.capacity * 2);
        }
        summary.decay_to(now / self.half_life_ns);
        summary.hit(key);
    }

    /// The tracked keys at `now`, heaviest first, with their error.
    pub fn report(&self, now: u64) -> TopReport {
        let mut summary = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        summary.decay_to(now / self.half_life_ns);
        let hits = |n: u64| n as f64 / ONE as f64;
        let mut keys: Vec<Offender> = summary
            .slots
            .iter()
            .filter(|s| s.count > 0)
            .map(|s| Offender {
                key: s.key.clone(),
                count: hits(s.count),
                error: hits(s.error),
            })
            .collect();
        keys.sort_by(|a, b| b.count.total_cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        TopReport {
            keys,
            total: hits(summary.total),
            error_bound: hits(summary.total) / self.capacity as f64,
        }
    }

    /// The most keys it tracks.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes it holds now (slots, key buffers, index): fixed once the first hit has
    /// allocated them, whatever the stream.
    pub fn allocated_bytes(&self) -> usize {
        let summary = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        summary.slots.capacity() * std::mem::size_of::<Slot>()
            + summary
                .slots
                .iter()
                .map(|s| s.key.capacity())
                .sum::<usize>()
            + summary.index.allocation_size()
    }
}

impl Summary {
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Halves everything once per half-life period passed since the last hit.
    fn decay_to(&mut self, period: u64) {
        if period <= self.period {
            return;
        }
        let shift = (period - self.period).min(63) as u32;
        self.period = period;
        self.total >>= shift;
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            if slot.count == 0 {
                continue;
            }
            slot.count >>= shift;
            slot.error >>= shift;
            if slot.count == 0 {
                // Decayed away: the slot is free again.
                let hash = slot.hash;
                if let Ok(entry) = self.index.find_entry(hash, |&j| j == i) {
                    entry.remove();
                }
                self.slots[i].key.clear();
            }
        }
    }

    fn hit(&mut self, key: &str) {
        self.total = self.total.saturating_add(ONE);
        let hash = self.hash(key);
        let slots = &self.slots;
        if let Some(&i) = self.index.find(hash, |&i| slots[i].key == key) {
            let slot = &mut self.slots[i];
            slot.count = slot.count.saturating_add(ONE);
            return;
        }
        // A free slot if there is one, else the lightest (Space-Saving's replacement).
        let mut i = 0;
        for (j, slot) in self.slots.iter().enumerate() {
            if slot.count < self.slots[i].count {
                i = j;
            }
            if slot.count == 0 {
                break;
            }
        }
        let Some(slot) = self.slots.get(i) else {
            return;
        };
        let (min, old) = (slot.count, slot.hash);
        if min > 0 {
            if let Ok(entry) = self.index.find_entry(old, |&j| j == i) {
                entry.remove();
            }
        }
        let slot = &mut self.slots[i];
        slot.key.clear();
        slot.key.push_str(key);
        slot.hash = hash;
        slot.count = min.saturating_add(ONE);
        slot.error = min;
        let slots = &self.slots;
        self.index.insert_unique(hash, i, |&j| slots[j].hash);
    }
}

impl Default for TopKeys {
    /// The engine's: 100 slots (counts at most 1% of the weight too high), a half-life
    /// of a minute.
    fn default() -> Self {
        Self::new(CAPACITY, HALF_LIFE_NS)
    }
}

/// A rule's top offenders.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleTop {
    /// The rule's name (an envoyproxy/ratelimit rule's label).
    pub rule: String,
    /// Keys it rejected (enforcing).
    pub limited: TopReport,
    /// Keys it would have rejected (shadow mode, or outside a rollout's share).
    pub shadow: TopReport,
}

impl RuleSet {
    /// The top offenders of the rule named `rule` (or of the envoyproxy/ratelimit rule
    /// labelled so) at `now`, keys as their parts; `None` when there is no such rule.
    pub(crate) fn top(&self, rule: &str, now: u64) -> Option<RuleTop> {
        let set = self;
        let counters = match set.rules.iter().position(|r| r.name == rule) {
            Some(i) => &set.counters[i],
            None => &set.envoy_rules.get(rule)?.counters,
        };
        Some(RuleTop {
            rule: rule.to_owned(),
            limited: parts_only(counters.top_limited.report(now)),
            shadow: parts_only(counters.top_shadow.report(now)),
        })
    }

    /// The top offenders of every rule (TOML rules, then envoyproxy/ratelimit rules by
    /// label).
    pub(crate) fn top_all(&self, now: u64) -> Vec<RuleTop> {
        let set = self;
        let native = set.rules.iter().map(|r| r.name.as_str()).zip(&set.counters);
        let envoy = set
            .envoy_rules
            .iter()
            .map(|(label, yaml)| (label.as_str(), &yaml.counters));
        native
            .chain(envoy)
            .map(|(rule, c)| RuleTop {
                rule: rule.to_owned(),
                limited: parts_only(c.top_limited.report(now)),
                shadow: parts_only(c.top_shadow.report(now)),
            })
            .collect()
    }
}

/// The keys of `report` without their `name@fingerprint|` prefix: the key parts, as
/// [`Engine::key_state`](crate::engine::Engine::key_state) takes them (`~client|` first where the client's address stood in
/// for a missing part).
fn parts_only(mut report: TopReport) -> TopReport {
    for offender in &mut report.keys {
        if let Some((head, parts)) = offender.key.split_once('|') {
            offender.key = if head.ends_with(STOOD_IN) {
                format!("{STOOD_IN}|{parts}")
            } else {
                parts.to_owned()
            };
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_stays_fixed_over_a_stream_of_distinct_keys() {
        let top = TopKeys::new(16, 1_000);
        top.record("first", 0);
        let bytes = top.allocated_bytes();
        for i in 0..100_000u64 {
            top.record(&format!("client-{i}"), i);
        }
        assert_eq!(top.allocated_bytes(), bytes);
        assert!(top.report(100_000).keys.len() <= 16);
    }

    /// Where every buffer the hot path touches lives: unchanged means nothing was
    /// reallocated (and the hot path allocates nowhere else).
    fn buffers(top: &TopKeys) -> (Vec<*const u8>, *const Slot, usize) {
        let summary = top.inner.lock().unwrap();
        (
            summary.slots.iter().map(|s| s.key.as_ptr()).collect(),
            summary.slots.as_ptr(),
            summary.index.allocation_size(),
        )
    }

    #[test]
    fn hits_and_takeovers_reallocate_no_buffer() {
        let top = TopKeys::new(100, 60_000_000_000);
        let keys: Vec<String> = (0..5_000)
            .map(|i| format!("per-ip@0|198.51.{i}/32"))
            .collect();
        top.record(&keys[0], 0);
        let before = buffers(&top);
        // Tracked keys, over and over.
        for round in 0..200u64 {
            for key in &keys[..50] {
                top.record(key, round);
            }
        }
        assert_eq!(buffers(&top), before, "a tracked key's hit reallocated");
        // A stream of new keys taking slots over, then decaying away.
        for (i, key) in keys.iter().enumerate() {
            top.record(key, 1_000 + i as u64 * 1_000_000_000);
        }
        assert_eq!(buffers(&top), before, "taking a slot over reallocated");
    }

    #[test]
    fn a_hit_halves_at_each_half_life_and_then_is_gone() {
        let top = TopKeys::new(4, 10);
        for _ in 0..4 {
            top.record("a", 0);
        }
        assert_eq!(top.report(9).keys[0].count, 4.0);
        assert_eq!(top.report(10).keys[0].count, 2.0);
        assert_eq!(top.report(35).keys[0].count, 0.5);
        assert_eq!(top.report(35).total, 0.5);
        assert!(top.report(10 * 40).keys.is_empty(), "decayed away");
        // A freed slot takes a new key without disturbing the others.
        top.record("b", 10 * 40);
        assert_eq!(top.report(10 * 40).keys[0].key, "b");
    }
}
