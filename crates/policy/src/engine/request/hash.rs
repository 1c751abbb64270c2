//! The hashes behind stored keys and rollout shares, with a fixed definition.
//!
//! Counters live in a store that several processes share, possibly built by different
//! compilers: a hash that decides a key or a rollout share must give the same bits
//! everywhere, forever. `std`'s `DefaultHasher` promises neither (its algorithm may change
//! between Rust releases), so every hash here is SHA-256 (FIPS 180-4) truncated, through
//! `ring`, which the TLS stack already builds. API keys are secrets, so their digest must
//! also be one-way: SHA-256 is, where SipHash with known keys is not.

use ring::digest::{digest, SHA256};

use crate::config::Rule;

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    push_hex(&mut text, bytes);
    text
}

/// Appends `bytes` in lowercase hex: by table, not `core::fmt` (which costs an API-keyed
/// decision more than the SHA-256 before it).
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// A rule's fingerprint, the part after `@` in its keys: the first 4 bytes of SHA-256 over
/// its algorithm, numbers and cost (their `Debug` text), as 8 hex digits. A reload that
/// changes a rule's numbers changes its keys, so its counters start afresh.
///
/// # Examples
///
/// ```
/// let rule = &ratewarden_policy::config::parse(
///     "x.toml",
///     "[[limit]]\nname = \"a\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1\n",
/// ).unwrap().rules[0];
/// assert_eq!(ratewarden_policy::fingerprint(rule).len(), 8);
/// ```
pub fn fingerprint(rule: &Rule) -> String {
    let mut text = format!("{:?}|{:?}", rule.limit, rule.cost);
    // Only adaptive rules add theirs: every other rule keeps the fingerprint (and the
    // counters and keys) it had.
    if let Some(adaptive) = &rule.adaptive {
        text.push_str(&format!("|{adaptive:?}"));
    }
    hex(&sha256(text.as_bytes())[..4])
}

/// Which of 10,000 rollout buckets `key` falls in: the first 8 bytes of SHA-256 over the
/// key, big-endian, modulo 10,000. A rollout of `p` basis points enforces the keys in
/// buckets below `p`, the same keys on every instance and after every restart.
///
/// # Examples
///
/// ```
/// assert!(ratewarden_policy::rollout_bucket("rule@0|1.2.3.4") < 10_000);
/// ```
pub fn rollout_bucket(key: &str) -> u16 {
    let hash = sha256(key.as_bytes());
    let mut first = [0; 8];
    first.copy_from_slice(&hash[..8]);
    // Below 10,000: the cast cannot truncate.
    (u64::from_be_bytes(first) % 10_000) as u16
}

/// What an API key is stored and logged as: `key:` and the first 8 bytes of its SHA-256 as
/// 16 hex digits. Keys show up in logs and metrics; the digest does not give the secret
/// back, and 64 bits keep distinct keys apart.
///
/// # Examples
///
/// ```
/// assert_eq!(ratewarden_policy::api_key_digest("alice").len(), 4 + 16);
/// ```
pub fn api_key_digest(token: &str) -> String {
    let mut out = String::with_capacity(4 + 16);
    push_api_key_digest(&mut out, token);
    out
}

/// Appends [`api_key_digest`]`(token)` to `out` (a key being built).
pub(crate) fn push_api_key_digest(out: &mut String, token: &str) {
    out.push_str("key:");
    push_hex(out, &sha256(token.as_bytes())[..8]);
}

/// A key part as it is stored: the value itself, with `%`, `|` and a leading `#` escaped
/// (`%25`, `%7C`, `%23`) so that no value can spell a part boundary or a digest, and so two
/// different lists of parts never make one key (`a|b` + `c` against `a` + `b|c`); a value
/// longer than [`MAX_PART`] bytes is stored as `#` and the first 16 bytes of its SHA-256 in
/// hex (33 bytes), so a 200 KB header does not make a 200 KB key.
pub(crate) fn bounded_part(part: &str) -> std::borrow::Cow<'_, str> {
    if part.len() > MAX_PART {
        let mut out = String::with_capacity(1 + 32);
        out.push('#');
        push_hex(&mut out, &sha256(part.as_bytes())[..16]);
        return out.into();
    }
    if !part.starts_with('#') && !part.contains(['|', '%']) {
        return part.into();
    }
    let mut out = String::with_capacity(part.len() + 8);
    for (i, c) in part.char_indices() {
        match c {
            '%' => out.push_str("%25"),
            '|' => out.push_str("%7C"),
            '#' if i == 0 => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out.into()
}

/// The longest key part stored as it is.
pub(crate) const MAX_PART: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_lists_of_parts_make_one_key() {
        let key = |parts: &[&str]| {
            parts
                .iter()
                .map(|p| bounded_part(p).into_owned())
                .collect::<Vec<_>>()
                .join("|")
        };
        assert_ne!(key(&["a|b", "c"]), key(&["a", "b|c"]));
        assert_ne!(key(&["a%7Cb", "c"]), key(&["a|b", "c"]));
        let long = "x".repeat(MAX_PART + 1);
        let digest = bounded_part(&long).into_owned();
        assert_ne!(
            bounded_part(&digest),
            digest.as_str(),
            "a value spelling a digest"
        );
        assert_eq!(
            bounded_part("acme"),
            "acme",
            "most values are stored as they are"
        );
        assert_eq!(bounded_part("a#b"), "a#b");
    }

    #[test]
    fn hex_is_lowercase_two_digits_a_byte_as_fmt_writes_it() {
        let bytes: Vec<u8> = (0..=255).collect();
        let by_fmt: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&bytes), by_fmt);
        // The stored form of a key is fixed forever: SHA-256("alice"), first 8 bytes.
        assert_eq!(api_key_digest("alice"), "key:2bd806c97f0e00af");
    }
}
