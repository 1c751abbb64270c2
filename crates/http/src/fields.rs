//! `RateLimit-Policy` and `RateLimit` written straight into a string of the exact length.
//!
//! Both are Structured Field lists (RFC 9651) of the simplest kind: each member an sf-string
//! (the policy's name) with integer or sf-string parameters. For that subset the
//! serialization is fixed by the RFC and short: a string in quotes with `\` and `"`
//! escaped, visible ASCII and space only; integers in decimal, at most 15 digits. Written
//! by hand it is one allocation of the final size per field, where a general serializer
//! (the `sfv` crate, through `core::fmt`) grew its string and formatted every integer: it
//! was a quarter of the tower layer's cost per request. The test suite checks every
//! output against `sfv`'s, and parses it back with `sfv`.
//!
//! The exact capacity matters beyond the copy: `http::HeaderValue::try_from(String)` keeps
//! the buffer without copying, and without a second allocation only when the string's
//! length equals its capacity.

use ratewarden_core::NANOS_PER_SEC;

use crate::PolicyState;

/// Structured Field integers stop at 15 digits.
const SF_INT_MAX: u64 = 999_999_999_999_999;

/// The length of `name` serialized as an sf-string, or `None` when it cannot be one (a
/// character outside visible ASCII and space): such a policy is left out of the fields.
fn sf_string_len(name: &str) -> Option<usize> {
    let mut len = 2;
    for b in name.bytes() {
        match b {
            b'"' | b'\\' => len += 2,
            0x20..=0x7e => len += 1,
            _ => return None,
        }
    }
    Some(len)
}

/// Writes `name` as an sf-string whose length [`sf_string_len`] gave as `len`.
fn push_sf_string(out: &mut String, name: &str, len: usize) {
    out.push('"');
    if len == name.len() + 2 {
        // Nothing to escape (the common case: rule names are plain): one copy, without
        // the search for quotes and backslashes.
        out.push_str(name);
        out.push('"');
        return;
    }
    let mut rest = name;
    while let Some(at) = rest.find(['"', '\\']) {
        out.push_str(&rest[..at]);
        out.push('\\');
        out.push_str(&rest[at..=at]);
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

/// Decimal digits of `n` (at least 1).
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// One integer parameter: `;k=n`, `n` clamped to the Structured Field range.
struct Int(&'static str, u64);

impl Int {
    fn len(&self) -> usize {
        2 + self.0.len() + digits(self.1.min(SF_INT_MAX))
    }

    fn push(&self, out: &mut String) {
        out.push(';');
        out.push_str(self.0);
        out.push('=');
        out.push_str(itoa::Buffer::new().format(self.1.min(SF_INT_MAX)));
    }
}

/// A list of the policies that can be named, each with its parameters, or `None` when there
/// is none. `params` gives a policy's integer parameters and, for `RateLimit-Policy`, its
/// unit (an sf-string parameter `qu`, placed after the first integer as the draft's
/// examples do).
fn list<'p, const N: usize>(
    policies: &[PolicyState<'p>],
    params: impl Fn(&PolicyState<'p>) -> ([Option<Int>; N], Option<&'p str>),
) -> Option<String> {
    let mut len = 0;
    let mut members = 0;
    for p in policies {
        let Some(name) = sf_string_len(p.name) else {
            continue;
        };
        let (ints, unit) = params(p);
        len += name + ints.iter().flatten().map(Int::len).sum::<usize>();
        len += unit.and_then(sf_string_len).map_or(0, |u| u + 4);
        members += 1;
    }
    if members == 0 {
        return None;
    }
    len += (members - 1) * 2;
    let mut out = String::with_capacity(len);
    for p in policies {
        let Some(name) = sf_string_len(p.name) else {
            continue;
        };
        if !out.is_empty() {
            out.push_str(", ");
        }
        push_sf_string(&mut out, p.name, name);
        let (ints, unit) = params(p);
        for (i, int) in ints.iter().enumerate() {
            if let Some(int) = int {
                int.push(&mut out);
            }
            if i == 0 {
                if let Some((unit, len)) = unit.and_then(|u| Some((u, sf_string_len(u)?))) {
                    out.push_str(";qu=");
                    push_sf_string(&mut out, unit, len);
                }
            }
        }
    }
    debug_assert_eq!(out.len(), len, "the computed length is the written one");
    Some(out)
}

/// `RateLimit-Policy`: each policy's quota, unit and window.
pub(crate) fn policy_field(policies: &[PolicyState<'_>]) -> Option<String> {
    list(policies, |p| {
        (
            [
                Some(Int("q", p.decision.limit)),
                p.window_secs.map(|w| Int("w", w.max(1))),
            ],
            p.unit,
        )
    })
}

/// `RateLimit`: what each policy has left, and within how many seconds.
pub(crate) fn state_field(policies: &[PolicyState<'_>]) -> Option<String> {
    list(policies, |p| {
        let t = p.decision.reset_after_ns.div_ceil(NANOS_PER_SEC);
        (
            [Some(Int("r", p.decision.remaining)), Some(Int("t", t))],
            None,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_count_every_power_of_ten() {
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(999_999_999_999_999), 15);
        assert_eq!(digits(u64::MAX), 20);
    }

    #[test]
    fn quotes_and_backslashes_are_escaped_in_place() {
        let mut out = String::new();
        let len = sf_string_len(r#"a"b\c""#).expect("visible ASCII");
        push_sf_string(&mut out, r#"a"b\c""#, len);
        assert_eq!(out, r#""a\"b\\c\"""#);
        assert_eq!(len, out.len());
        let mut plain = String::new();
        push_sf_string(
            &mut plain,
            "per-user",
            sf_string_len("per-user").expect("plain"),
        );
        assert_eq!(plain, r#""per-user""#);
        assert_eq!(sf_string_len("caf\u{e9}"), None);
        assert_eq!(sf_string_len("tab\there"), None);
    }
}
