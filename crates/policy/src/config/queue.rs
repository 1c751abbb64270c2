//! `[limit.queue]`: an adaptive rule's excess waits in a fair queue instead of being
//! refused at once.
//!
//! ```toml
//! [[limit]]
//! name = "upstream"
//! key = ["global"]
//! algorithm = "adaptive-concurrency"
//!
//! [limit.queue]
//! key = "tenant"      # whose turn it is: waiters are served fairly across this part
//! max_wait = "1s"     # past it, the shed answer (503)
//! queues = 64         # lanes in all
//! hand = 8            # lanes one tenant may use (shuffle sharding)
//! queue_length = 50   # waiters one lane holds
//!
//! [limit.queue.weights]
//! "tenant-a" = 4      # four turns for every one of a tenant of weight 1
//! ```

use std::collections::BTreeMap;
use std::ops::Range;

use ratewarden_core::adaptive::FairQueueConfig;
use toml::Spanned;

use super::error::Errors;
use super::key::key_part;
use super::raw::RawQueue;
use super::KeyPart;
use crate::hint::did_you_mean;
use crate::ip::IpGrouping;

/// The most a tenant's weight may be: a weight of `w` costs `1/w` of a turn, counted in
/// thousandths.
pub const MAX_WEIGHT: u64 = 1_000;

/// The most lanes (each an empty list until used, per rule key and class).
const MAX_QUEUES: u64 = 1_024;

/// The most waiters one lane holds.
const MAX_QUEUE_LENGTH: u64 = 10_000;

/// Where an adaptive rule's excess waits: a [`FairQueue`](ratewarden_core::adaptive::FairQueue)
/// per rule key and class, shared fairly across `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// Whose turn it is: waiters are served fairly across this part's values (`tenant`
    /// by default); a request without it is served as one flow of its own.
    pub key: KeyPart,
    /// Lanes, hand, lane length and the longest wait.
    pub shape: FairQueueConfig,
    /// The weights of named values of `key` (1 for the others).
    pub weights: BTreeMap<String, u64>,
}

impl Queue {
    /// The weight of the flow `value` (1 unless configured).
    pub fn weight(&self, value: &str) -> u64 {
        self.weights.get(value).copied().unwrap_or(1)
    }
}

/// Reads `[limit.queue]` at `raw`; `None` after recording what was wrong.
pub(super) fn queue(
    raw: &Spanned<RawQueue>,
    grouping: IpGrouping,
    rule: Option<&str>,
    errors: &mut Errors<'_>,
) -> Option<Queue> {
    let failures = errors.found.len();
    let table = raw.span();
    let raw = raw.get_ref();
    let key = match &raw.key {
        None => KeyPart::Tenant,
        Some(text) => {
            let given = text.get_ref().trim();
            match key_part(given, grouping) {
                Some(KeyPart::Descriptor | KeyPart::Bucket) | None => {
                    let hint = did_you_mean(given, ["tenant", "api_key", "ip", "route"]);
                    let message = format!(
                        "`queue.key` is one key part (tenant, api_key, ip, header:NAME, route, global or literal:TEXT), not `{given}`{hint}"
                    );
                    errors.at(Some(text.span()), rule, message);
                    KeyPart::Tenant
                }
                Some(part) => part,
            }
        }
    };
    let d = FairQueueConfig::default();
    let mut count = |value: &Option<Spanned<i64>>, field: &str, default: u64, most: u64| {
        let Some(v) = value else { return default };
        let what = format!("`queue.{field}`");
        match errors.whole::<u64>(v, &what, rule, false) {
            Some(n) if n <= most => n,
            Some(n) => {
                errors.at(
                    Some(v.span()),
                    rule,
                    format!("{what} is at most {most}, not {n}"),
                );
                default
            }
            None => default,
        }
    };
    let queues = count(&raw.queues, "queues", d.queues.into(), MAX_QUEUES);
    let hand = count(&raw.hand, "hand", d.hand.into(), MAX_QUEUES);
    let queue_length = count(
        &raw.queue_length,
        "queue_length",
        d.queue_length.into(),
        MAX_QUEUE_LENGTH,
    );
    if hand > queues {
        let at = raw.hand.as_ref().map_or(table.clone(), Spanned::span);
        let message = format!("`queue.hand` ({hand}) is more than the {queues} `queue.queues`");
        errors.at(Some(at), rule, message);
    }
    let max_wait_ns = errors
        .duration(raw.max_wait.as_ref(), "`queue.max_wait`", rule, false)
        .map_or(d.max_wait_ns, |w| {
            u64::try_from(w.as_nanos()).unwrap_or(u64::MAX)
        });
    let mut weights = BTreeMap::new();
    for (name, weight) in &raw.weights {
        let what = format!("the weight of `{}` in `queue.weights`", name.escape_debug());
        match errors.whole::<u64>(weight, &what, rule, false) {
            Some(w) if w <= MAX_WEIGHT => {
                weights.insert(name.clone(), w);
            }
            Some(w) => {
                let message = format!("{what} is at most {MAX_WEIGHT}, not {w}");
                errors.at(Some(weight.span()), rule, message);
            }
            None => {}
        }
    }
    if errors.found.len() > failures {
        return None;
    }
    let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    Some(Queue {
        key,
        shape: FairQueueConfig {
            queues: narrow(queues),
            hand: narrow(hand),
            queue_length: narrow(queue_length),
            max_wait_ns,
        },
        weights,
    })
}

/// Where a `[limit.queue]` is refused: on a rule that is not adaptive.
pub(super) fn stray(span: Range<usize>, rule: Option<&str>, errors: &mut Errors<'_>) {
    errors.at(
        Some(span),
        rule,
        "`queue` applies only to `algorithm = \"adaptive-concurrency\"` (other rules answer at once, or delay with `leaky-queue`)".to_owned(),
    );
}
