//! envoyproxy/ratelimit configuration files, loaded as they are, and descriptors resolved to
//! limits exactly as envoyproxy/ratelimit's `GetLimit` does.
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: client_id              # per-client default: one counter per value
//!     rate_limit: {unit: minute, requests_per_unit: 600, name: per_client}
//!   - key: client_id
//!     value: partner-a            # an exact value beats the bare key
//!     rate_limit: {unit: minute, requests_per_unit: 6000}
//!     ratewarden: {algorithm: gcra, burst: 100}   # our extension, see below
//!   - key: path
//!     value: /api/*/export        # `*` matches zero or more characters, anywhere
//!     descriptors:
//!       - key: client_id
//!         rate_limit: {unit: hour, requests_per_unit: 10}
//!         shadow_mode: true
//! ```
//!
//! # Loading
//!
//! [`load`] reads one file, or every `*.yaml` / `*.yml` file of a directory (not its
//! subdirectories, in name order), each file one `domain`; [`parse`] reads text. A domain
//! defined by two files is an error naming both (envoyproxy/ratelimit's default, without
//! `MERGE_DOMAIN_CONFIG`). Every error carries the file, line and column (columns count
//! characters) and, as its `rule`, the descriptor's full key as envoyproxy/ratelimit names it
//! in statistics (`edge.path_/api/*/export.client_id`).
//!
//! Accepted as envoyproxy/ratelimit accepts them (it reads YAML 1.1 with Go's `yaml.v2`):
//! `true`/`false` also spelt `yes`/`no`/`on`/`off`/`y`/`n`; unit names in any case; numbers
//! and other scalars where a string is expected are read as their text (`value: 50.0.0.5`);
//! a `rate_limit` without `requests_per_unit` limits to 0 (every request over the limit);
//! anchors, aliases and `<<` merge keys; `metadata` maps (kept out of [`Resolved`]);
//! `share_threshold` on a value without `*` (it then changes nothing).
//!
//! Rejected, each with its position: a key it does not know (with a did-you-mean hint), a
//! key given twice in one map, a missing or empty `domain` or `key`, an unknown `unit`, a
//! `rate_limit` with neither `unit` nor `unlimited: true`, `unlimited: true` with a `unit`, two
//! sibling descriptors with the same key and value (compared as envoyproxy/ratelimit does, by
//! the composite `key_value`), a `replaces` entry that is empty or names its own rule, and a
//! `requests_per_unit` that is negative or above 4,294,967,295 (a `uint32`).
//!
//! # Units and the default algorithm
//!
//! A rule decides with envoyproxy/ratelimit's algorithm unless told otherwise: a fixed window
//! aligned on the Unix epoch whose length is the unit's "divider" in seconds
//! ([`Unit::divider`]): 1, 60, 3,600, 86,400, 604,800 (week), 2,592,000 (month: 30 days) and
//! 31,536,000 (year: 365 days). A month window is therefore 30 days from an epoch-aligned
//! start, not a calendar month, exactly as envoyproxy/ratelimit counts it; for a calendar
//! month use the extension's `quota` algorithm.
//!
//! # The `ratewarden` extension
//!
//! A descriptor with a `rate_limit` may add a `ratewarden` map choosing another algorithm for
//! the same rule; envoyproxy/ratelimit itself rejects this key, so such a file is ours only.
//!
//! | `algorithm` | decides with | other keys |
//! |---|---|---|
//! | `fixed-window` (default) | [`FixedWindow`](ratewarden_core::FixedWindow), `requests_per_unit` per divider | none |
//! | `sliding-window` | [`SlidingWindow`](ratewarden_core::SlidingWindow), `requests_per_unit` per divider | none |
//! | `sliding-log` | [`SlidingLog`](ratewarden_core::SlidingLog), `requests_per_unit` per divider | none |
//! | `token-bucket`, `leaky-bucket`, `leaky-queue`, `gcra` | that bucket at `requests_per_unit` per divider | `burst` (default `requests_per_unit`) |
//! | `quota` | [`Quota`](ratewarden_core::Quota): a calendar second, minute, hour, day, ISO week, month or year | `timezone` (IANA name, default `UTC`) |
//!
//! Any of them may add `always_charge: true` (not `leaky-queue`): a refused call's hits are
//! charged all the same, into debt, as envoyproxy/ratelimit's counters count past the limit;
//! for calls that report what was spent, such as Envoy's `hits_addend` at a stream's end.
//!
//! The extension needs a `rate_limit` with a `unit` and a `requests_per_unit` above zero.
//! `concurrency` is refused: it is not a rate. The counter key stays envoyproxy/ratelimit's.
//!
//! # Resolving
//!
//! [`EnvoyConfig::resolve`] walks a descriptor's entries level by level: the exact
//! `key_value`, else the first wildcard value that matches (in file order), else the bare
//! key. A limit applies only when found at the level of the last entry; a walk that finds no
//! node, or a node without nested descriptors before the last entry, ends with no limit. A
//! node with neither `rate_limit` nor `descriptors` so resolves to none (it whitelists). The
//! caller then drops replaced rules with [`apply_replaces`], decides each rule, and combines
//! the statuses with [`overall`] (shadow and quota modes).
//!
//! # Bounds
//!
//! Aliases are expanded as copies, so a file of a few hundred bytes could otherwise name a
//! billion nodes. Aliases may copy at most 200,000 nodes (scalars, lists and maps) and
//! 16 MiB of text in one file, and lists and maps may nest at most 64 levels (an alias
//! counting at its full depth). Crossing one is an error at the alias or collection that crossed it.
//!
//! # Layout
//!
//! `model.rs` holds the loaded config, `yaml.rs` reads YAML into a tree with positions,
//! `validate.rs` and `rule.rs` check it against envoyproxy/ratelimit's shape, `load.rs` reads
//! files and directories, `resolve.rs` answers descriptors, `unit.rs` holds the units.

mod errors;
mod fields;
mod load;
mod model;
mod resolve;
mod rule;
mod unit;
mod validate;
mod yaml;

pub use load::{load, parse};
pub use model::{
    DecidingRule, Descriptor, Domain, EnvoyConfig, EnvoyRule, RateLimitOverride, Resolved,
};
pub use resolve::{apply_replaces, glob, overall};
pub use unit::Unit;
