//! `RateLimit` and `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers, Structured
//! Fields), OpenAI's `x-ratelimit-*-requests` and `-tokens`, and the legacy
//! `X-RateLimit-*` trio.

use std::borrow::Cow;
use std::time::Duration;

use http::HeaderMap;
use ratewarden_core::NANOS_PER_SEC;
use ratewarden_http::{
    RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use sfv::visitor::{
    EntryVisitor, Ignored, InnerListVisitor, ItemVisitor, ListVisitor, ParameterVisitor,
};
use sfv::{BareItemFromInput, GenericBareItem, KeyRef};

use crate::Error;

/// Reset values above this many seconds are Unix times, not delays (GitHub and others send
/// `X-RateLimit-Reset` as an epoch second; no window lasts thirty years).
const EPOCH_RESET_ABOVE: u64 = 1_000_000_000;

/// One policy's quota, as a response reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The policy's name (`None` for the legacy fields, which describe one unnamed limit).
    pub policy: Option<String>,
    /// Units the client may still spend (`r`).
    pub remaining: u64,
    /// Until the quota resets (`t`).
    pub reset: Duration,
    /// The quota (`q` of `RateLimit-Policy`, or `X-RateLimit-Limit`), when sent.
    pub limit: Option<u64>,
    /// The policy's window (`w`), when sent.
    pub window: Option<Duration>,
}

/// Every quota `headers` report, read at `now` (nanoseconds since the Unix epoch): the
/// `RateLimit` field's policies, each with its `RateLimit-Policy` entry when there is one;
/// otherwise OpenAI's `x-ratelimit-*-requests` and `x-ratelimit-*-tokens` (as policies
/// named `requests` and `tokens`, the reset a Go duration such as `6m0s`) and the legacy
/// `X-RateLimit-*` fields; otherwise none.
///
/// # Errors
///
/// [`Error::Field`] naming the field and value, when one is present but malformed.
///
/// # Examples
///
/// ```
/// use http::HeaderMap;
/// use ratewarden_client::quotas;
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit-policy", r#""per-key";q=5;w=1"#.parse()?);
/// headers.insert("ratelimit", r#""per-key";r=3;t=1"#.parse()?);
/// let q = &quotas(&headers, 0)?[0];
/// assert_eq!((q.policy.as_deref(), q.remaining, q.reset), (Some("per-key"), 3, Duration::from_secs(1)));
/// assert_eq!((q.limit, q.window), (Some(5), Some(Duration::from_secs(1))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn quotas(headers: &HeaderMap, now: u64) -> Result<Vec<Quota>, Error> {
    let mut all = Vec::new();
    each_quota(headers, now, |q| all.push(q.to_quota()))?;
    Ok(all)
}

/// A quota as the fields report it, its policy's name borrowed from them (unless it had
/// escapes): what pacing reads from every response, without allocating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reported<'a> {
    /// The policy's name (`None` for the legacy fields).
    pub(crate) policy: Option<Cow<'a, str>>,
    /// `r`.
    pub(crate) remaining: u64,
    /// `t`, else the window.
    pub(crate) reset: Duration,
    /// `q`.
    pub(crate) limit: Option<u64>,
    /// `w`.
    pub(crate) window: Option<Duration>,
}

impl Reported<'_> {
    /// The quota, owned.
    pub(crate) fn to_quota(&self) -> Quota {
        Quota {
            policy: self.policy.as_deref().map(str::to_owned),
            remaining: self.remaining,
            reset: self.reset,
            limit: self.limit,
            window: self.window,
        }
    }
}

impl<'a> From<&'a Quota> for Reported<'a> {
    fn from(q: &'a Quota) -> Self {
        Self {
            policy: q.policy.as_deref().map(Cow::Borrowed),
            remaining: q.remaining,
            reset: q.reset,
            limit: q.limit,
            window: q.window,
        }
    }
}

/// Hands `each` every quota `headers` report, as [`quotas`] reads them, all or none: the
/// fields are checked whole before the first is handed over, so a malformed one never
/// leaves half its quotas applied.
pub(crate) fn each_quota(
    headers: &HeaderMap,
    now: u64,
    mut each: impl FnMut(Reported<'_>),
) -> Result<(), Error> {
    if headers.contains_key(&RATELIMIT) {
        let policies = PolicyTable::read(headers)?;
        return each_stated_quota(headers, policies.as_ref(), each);
    }
    // Both of OpenAI's families read before either is handed over: all or none.
    let mut families = [None, None];
    for (slot, family) in families.iter_mut().zip(OPENAI) {
        *slot = openai(headers, family)?;
    }
    let trio = legacy(headers, &X_RATELIMIT_REMAINING, "x-ratelimit-remaining")?;
    let trio = match trio {
        Some(remaining) => Some((
            remaining,
            legacy_reset(headers, now)?,
            legacy(headers, &X_RATELIMIT_LIMIT, "x-ratelimit-limit")?,
        )),
        None => None,
    };
    for q in families.into_iter().flatten() {
        each(q);
    }
    let Some((remaining, reset, limit)) = trio else {
        return Ok(());
    };
    each(Reported {
        policy: None,
        remaining,
        reset,
        limit,
        window: None,
    });
    Ok(())
}

/// OpenAI's families: the policy name each is reported under, and its three fields.
const OPENAI: [(&str, [&str; 3]); 2] = [
    (
        "requests",
        [
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
            "x-ratelimit-limit-requests",
        ],
    ),
    (
        "tokens",
        [
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
            "x-ratelimit-limit-tokens",
        ],
    ),
];

/// One of OpenAI's families, when its remaining field is there.
fn openai(
    headers: &HeaderMap,
    (family, [remaining, reset, limit]): (&'static str, [&'static str; 3]),
) -> Result<Option<Reported<'static>>, Error> {
    let number = |field: &'static str| -> Result<Option<u64>, Error> {
        let Some(value) = headers.get(field) else {
            return Ok(None);
        };
        let text = value.to_str().unwrap_or("").trim();
        text.parse::<u64>().map(Some).map_err(|_| Error::Field {
            field,
            value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            reason: "not a non-negative integer".to_owned(),
        })
    };
    let Some(left) = number(remaining)? else {
        return Ok(None);
    };
    let reset = match headers.get(reset) {
        None => Duration::ZERO,
        Some(value) => {
            let text = value.to_str().unwrap_or("").trim();
            go_duration(text).ok_or_else(|| Error::Field {
                field: reset,
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
                reason: "not a duration such as 6m0s, 1.5s or 20ms".to_owned(),
            })?
        }
    };
    Ok(Some(Reported {
        policy: Some(Cow::Borrowed(family)),
        remaining: left,
        reset,
        limit: number(limit)?,
        window: None,
    }))
}

/// A Go duration (`time.Duration`'s text, as OpenAI writes its resets): numbers, each with
/// a unit (`h`, `m`, `s`, `ms`, `us` or `µs`, `ns`), decimals allowed, such as `6m0s`,
/// `1.5s`, `20ms`; `None` when it is not one.
pub(crate) fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total: f64 = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&end| end > 0)?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600e9,
            "m" => 60e9,
            "s" => 1e9,
            "ms" => 1e6,
            "us" | "µs" => 1e3,
            "ns" => 1.0,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    // Rounded up to the nanosecond: a client that waits it never comes back early.
    Some(Duration::from_nanos(total.ceil() as u64))
}

/// The legacy `X-RateLimit-Reset`: seconds, or an epoch second (GitHub's).
fn legacy_reset(headers: &HeaderMap, now: u64) -> Result<Duration, Error> {
    Ok(
        match legacy(headers, &X_RATELIMIT_RESET, "x-ratelimit-reset")? {
            Some(at) if at > EPOCH_RESET_ABOVE => {
                Duration::from_nanos(at.saturating_mul(NANOS_PER_SEC).saturating_sub(now))
            }
            Some(secs) => Duration::from_secs(secs),
            None => Duration::ZERO,
        },
    )
}

/// A `RateLimit-Policy` field read whole: each policy's name with its `q` and `w`, in the
/// field's order. Owned, so that an origin can keep it while its policy does not change
/// (it changes with the server's configuration, where `RateLimit` changes every answer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PolicyTable {
    entries: Vec<(String, Option<u64>, Option<u64>)>,
}

impl PolicyTable {
    /// The `RateLimit-Policy` of `headers` (`None`: there is none).
    ///
    /// # Errors
    ///
    /// [`Error::Field`] when it is malformed.
    pub(crate) fn read(headers: &HeaderMap) -> Result<Option<Self>, Error> {
        let Some(policies) = joined(headers, &RATELIMIT_POLICY, "ratelimit-policy")? else {
            return Ok(None);
        };
        let mut table = Self::default();
        entries("ratelimit-policy", &policies, |name, p| {
            table.entries.push((name.into_owned(), p.q, p.w));
            Ok(())
        })?;
        Ok(Some(table))
    }

    /// `q` and `w` of the first policy named `name`.
    fn find(&self, name: &str) -> (Option<u64>, Option<Duration>) {
        self.entries
            .iter()
            .find(|(n, _, _)| n == name)
            .map_or((None, None), |(_, q, w)| (*q, w.map(Duration::from_secs)))
    }
}

/// Hands `each` every quota of the `RateLimit` field of `headers`, joined with `policies`
/// (the answer's `RateLimit-Policy`, read before), all or none as [`each_quota`]. Nothing
/// is allocated when the field is on one line and the names have no escapes.
pub(crate) fn each_stated_quota(
    headers: &HeaderMap,
    policies: Option<&PolicyTable>,
    mut each: impl FnMut(Reported<'_>),
) -> Result<(), Error> {
    let Some(state) = joined(headers, &RATELIMIT, "ratelimit")? else {
        return Ok(());
    };
    // Parsed once to check it whole, keeping its first few members; a field with more is
    // parsed again to read the rest.
    let mut stated = Kept::default();
    entries("ratelimit", &state, |name, p| match p.r {
        Some(_) => {
            stated.keep(name, p);
            Ok(())
        }
        None => Err(format!("policy {name:?} has no r=<integer>")),
    })?;
    let mut hand_over = |name: Cow<'_, str>, p: Params| {
        let (limit, window) = policies.map_or((None, None), |t| t.find(&name));
        // Without `t` the draft says the quota resets within its window.
        let reset = p.t.map(Duration::from_secs).or(window).unwrap_or_default();
        each(Reported {
            remaining: p.r.unwrap_or_default(),
            policy: Some(name),
            reset,
            limit,
            window,
        });
    };
    if stated.overflowed {
        return entries("ratelimit", &state, |name, p| {
            hand_over(name, p);
            Ok(())
        });
    }
    for (name, p) in stated.members.into_iter().flatten() {
        hand_over(name, p);
    }
    Ok(())
}

/// The first members of a list as the check read them (a response names one or two
/// policies): kept on the stack, so that reading them costs no second parse.
#[derive(Default)]
struct Kept<'v> {
    members: [Option<(Cow<'v, str>, Params)>; 4],
    len: usize,
    /// More members than were kept.
    overflowed: bool,
}

impl<'v> Kept<'v> {
    fn keep(&mut self, name: Cow<'v, str>, params: Params) {
        match self.members.get_mut(self.len) {
            Some(slot) => {
                *slot = Some((name, params));
                self.len += 1;
            }
            None => self.overflowed = true,
        }
    }
}

/// Every line of field `name`, joined as one list (RFC 9110 section 5.3); borrowed when
/// there is one line.
fn joined<'h>(
    headers: &'h HeaderMap,
    name: &http::HeaderName,
    field: &'static str,
) -> Result<Option<Cow<'h, str>>, Error> {
    let text = |value: &'h http::HeaderValue| {
        value.to_str().map_err(|_| Error::Field {
            field,
            value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            reason: "not ASCII".to_owned(),
        })
    };
    let mut lines = headers.get_all(name).iter();
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    let mut all = Cow::Borrowed(text(first)?);
    for value in lines {
        let all = all.to_mut();
        all.push_str(", ");
        all.push_str(text(value)?);
    }
    Ok(Some(all))
}

/// The integer parameters a quota reads (the last of each name wins, as RFC 9651 says;
/// a non-integer or negative one is absent).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Params {
    r: Option<u64>,
    t: Option<u64>,
    q: Option<u64>,
    w: Option<u64>,
}

/// Hands `each` every member of the Structured Field list `value` of `field`: a named item
/// (the name a String, or a Token as early drafts sent) and its parameters. The usual shape
/// is read by hand ([`usual`]); anything else is parsed with `sfv`'s visitors, so nothing
/// is allocated for a name without escapes.
fn entries<'v>(
    field: &'static str,
    value: &'v str,
    mut each: impl FnMut(Cow<'v, str>, Params) -> Result<(), String>,
) -> Result<(), Error> {
    let Some((members, len)) = usual(value) else {
        return entries_sfv(field, value, each);
    };
    for (name, params) in &members[..len] {
        each(Cow::Borrowed(name), *params).map_err(|reason| Error::Field {
            field,
            value: value.to_owned(),
            reason,
        })?;
    }
    Ok(())
}

/// The most members [`usual`] reads (a response names one or two policies); a longer list
/// goes to `sfv`.
const USUAL_MEMBERS: usize = 4;

/// The members of `value` when it has the shape servers send, `"name";r=N;t=N` (any
/// lowercase keys, integer values), members apart by a comma and spaces: read by hand,
/// since `sfv`'s general parse was most of what a changed `RateLimit` cost. `None` for
/// anything else, which `sfv` then reads (or refuses): other spacing, escapes, tokens,
/// booleans, decimals, negative numbers, inner lists, more than [`USUAL_MEMBERS`] members
/// and every malformed field. Read whole before any member is handed over, so a field
/// that turns out unusual half-way is not handed over twice.
fn usual(value: &str) -> Option<([(&str, Params); USUAL_MEMBERS], usize)> {
    let b = value.as_bytes();
    let mut members = [("", Params::default()); USUAL_MEMBERS];
    let mut len = 0;
    let mut i = 0;
    loop {
        // A String with no escapes (RFC 9651 section 3.3.3: %x20-21 / %x23-5B / %x5D-7E).
        if b.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        let start = i;
        loop {
            match *b.get(i)? {
                b'"' => break,
                b'\\' => return None,
                0x20..=0x7e => i += 1,
                _ => return None,
            }
        }
        let name = &value[start..i];
        i += 1;
        let mut params = Params::default();
        while b.get(i) == Some(&b';') {
            i += 1;
            let key_start = i;
            while matches!(b.get(i), Some(b'a'..=b'z')) {
                i += 1;
            }
            let key = &b[key_start..i];
            // Space after `;`, a key with other characters, or a Boolean: `sfv`'s.
            if key.is_empty() || b.get(i) != Some(&b'=') {
                return None;
            }
            i += 1;
            let digits_start = i;
            let mut n: u64 = 0;
            while let Some(d @ b'0'..=b'9') = b.get(i) {
                n = n * 10 + u64::from(d - b'0');
                i += 1;
                // An Integer has at most 15 digits; more is malformed, for `sfv` to say.
                if i - digits_start > 15 {
                    return None;
                }
            }
            if i == digits_start {
                return None;
            }
            // The last of a key wins (RFC 9651 section 4.2.3.2), as in `Member::parameter`.
            match key {
                b"r" => params.r = Some(n),
                b"t" => params.t = Some(n),
                b"q" => params.q = Some(n),
                b"w" => params.w = Some(n),
                _ => {}
            }
        }
        let slot = members.get_mut(len)?;
        *slot = (name, params);
        len += 1;
        // What follows a member: the end, or a comma and spaces before the next one; a
        // decimal's `.`, a letter after the digits, space before the comma: `sfv`'s.
        match b.get(i) {
            None => return Some((members, len)),
            Some(b',') => i += 1,
            Some(_) => return None,
        }
        while b.get(i) == Some(&b' ') {
            i += 1;
        }
    }
}

/// [`entries`] by `sfv`'s parse, for every field that is not [`usual`].
fn entries_sfv<'v>(
    field: &'static str,
    value: &'v str,
    mut each: impl FnMut(Cow<'v, str>, Params) -> Result<(), String>,
) -> Result<(), Error> {
    let mut failed = None;
    let parsed = sfv::Parser::new(value).parse_list_with_visitor(Members {
        each: &mut each,
        failed: &mut failed,
    });
    let bad = |reason: String| Error::Field {
        field,
        value: value.to_owned(),
        reason,
    };
    match (parsed, failed) {
        (_, Some(reason)) => Err(bad(reason)),
        (Err(e), None) => Err(bad(format!("not a Structured Field list: {e}"))),
        (Ok(()), None) => Ok(()),
    }
}

/// Stops the parse; what was wrong is in the visitor's `failed`.
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped")
    }
}

impl std::error::Error for Stop {}

/// The list's visitor, and each member's: the callback and where a failure is written.
struct Members<'a, F> {
    each: &'a mut F,
    failed: &'a mut Option<String>,
}

impl<'de, F> ListVisitor<'de> for Members<'_, F>
where
    F: FnMut(Cow<'de, str>, Params) -> Result<(), String>,
{
    type Out = ();
    type Error = Stop;

    fn entry(&mut self) -> Result<impl EntryVisitor<'de>, Stop> {
        Ok(Members {
            each: &mut *self.each,
            failed: &mut *self.failed,
        })
    }

    fn finish(self) -> Result<(), Stop> {
        Ok(())
    }
}

impl<'de, F> EntryVisitor<'de> for Members<'_, F>
where
    F: FnMut(Cow<'de, str>, Params) -> Result<(), String>,
{
    type Error = Stop;

    fn item(self) -> Result<impl ItemVisitor<'de>, Stop> {
        Ok(self)
    }

    fn inner_list(self) -> Result<impl InnerListVisitor<'de>, Stop> {
        *self.failed = Some("an inner list where a policy was expected".to_owned());
        Err::<Ignored, _>(Stop)
    }
}

impl<'de, F> ItemVisitor<'de> for Members<'_, F>
where
    F: FnMut(Cow<'de, str>, Params) -> Result<(), String>,
{
    type Out = ();
    type Error = Stop;

    fn bare_item(
        self,
        bare_item: BareItemFromInput<'de>,
    ) -> Result<impl ParameterVisitor<'de, Out = ()>, Stop> {
        let name = match bare_item {
            GenericBareItem::String(Cow::Borrowed(s)) => Cow::Borrowed(s.as_str()),
            GenericBareItem::String(Cow::Owned(s)) => Cow::Owned(s.into()),
            GenericBareItem::Token(t) => Cow::Borrowed(t.as_str()),
            other => {
                *self.failed = Some(format!("a policy named by {other:?}"));
                return Err(Stop);
            }
        };
        Ok(Member {
            members: self,
            name,
            params: Params::default(),
        })
    }
}

/// One member, its name read, its parameters being read.
struct Member<'a, 'de, F> {
    members: Members<'a, F>,
    name: Cow<'de, str>,
    params: Params,
}

impl<'de, F> ParameterVisitor<'de> for Member<'_, 'de, F>
where
    F: FnMut(Cow<'de, str>, Params) -> Result<(), String>,
{
    type Out = ();
    type Error = Stop;

    fn parameter(&mut self, key: &'de KeyRef, value: BareItemFromInput<'de>) -> Result<(), Stop> {
        let slot = match key.as_str() {
            "r" => &mut self.params.r,
            "t" => &mut self.params.t,
            "q" => &mut self.params.q,
            "w" => &mut self.params.w,
            _ => return Ok(()),
        };
        *slot = value
            .as_integer()
            .and_then(|n| u64::try_from(i64::from(n)).ok());
        Ok(())
    }

    fn finish(self) -> Result<(), Stop> {
        let Member {
            members,
            name,
            params,
        } = self;
        (members.each)(name, params).map_err(|reason| {
            *members.failed = Some(reason);
            Stop
        })
    }
}

fn legacy(
    headers: &HeaderMap,
    name: &http::HeaderName,
    field: &'static str,
) -> Result<Option<u64>, Error> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or("").trim();
    text.parse::<u64>().map(Some).map_err(|_| Error::Field {
        field,
        value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
        reason: "not a non-negative integer".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn each_policy_is_joined_with_its_quota_and_window() {
        let h = headers(&[
            (
                "ratelimit-policy",
                r#""burst";q=100;w=60, "day";q=1000;w=86400"#,
            ),
            ("ratelimit", r#""burst";r=40;t=12, "day";r=900;t=3600"#),
        ]);
        let q = quotas(&h, 0).unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q[1].policy.as_deref(), Some("day"));
        assert_eq!((q[1].remaining, q[1].limit), (900, Some(1000)));
        assert_eq!(q[1].reset, Duration::from_secs(3600));
        assert_eq!(q[1].window, Some(Duration::from_secs(86_400)));
    }

    #[test]
    fn split_field_lines_are_one_list_and_tokens_name_policies() {
        let h = headers(&[("ratelimit", "a;r=1;t=2"), ("ratelimit", r#""b";r=0;t=5"#)]);
        let q = quotas(&h, 0).unwrap();
        assert_eq!(q.iter().map(|q| q.remaining).collect::<Vec<_>>(), [1, 0]);
        assert_eq!(q[0].policy.as_deref(), Some("a"));
    }

    #[test]
    fn legacy_reset_reads_as_seconds_or_as_an_epoch_time() {
        let h = headers(&[
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "7"),
            ("x-ratelimit-reset", "30"),
        ]);
        let q = quotas(&h, 0).unwrap();
        assert_eq!(
            (q[0].remaining, q[0].limit, q[0].reset),
            (7, Some(60), Duration::from_secs(30))
        );
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000060"),
        ]);
        let now = 1_700_000_000 * NANOS_PER_SEC;
        assert_eq!(quotas(&h, now).unwrap()[0].reset, Duration::from_secs(60));
    }

    #[test]
    fn openai_fields_read_as_a_requests_and_a_tokens_policy() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-requests", "499"),
            ("x-ratelimit-reset-requests", "120ms"),
            ("x-ratelimit-limit-tokens", "1000000"),
            ("x-ratelimit-remaining-tokens", "999500"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let q = quotas(&h, 0).unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(
            (
                q[0].policy.as_deref(),
                q[0].remaining,
                q[0].limit,
                q[0].reset
            ),
            (Some("requests"), 499, Some(500), Duration::from_millis(120))
        );
        assert_eq!(
            (
                q[1].policy.as_deref(),
                q[1].remaining,
                q[1].limit,
                q[1].reset
            ),
            (
                Some("tokens"),
                999_500,
                Some(1_000_000),
                Duration::from_secs(360)
            )
        );
        // All or none: a malformed reset hands over neither family.
        let bad = headers(&[
            ("x-ratelimit-remaining-requests", "1"),
            ("x-ratelimit-remaining-tokens", "5"),
            ("x-ratelimit-reset-tokens", "soon"),
        ]);
        let error = quotas(&bad, 0).unwrap_err().to_string();
        assert!(error.contains("x-ratelimit-reset-tokens"), "{error}");
    }

    #[test]
    fn go_durations_read_as_go_writes_them() {
        for (text, ns) in [
            ("0s", 0),
            ("0", 0),
            ("20ms", 20_000_000),
            ("1s", 1_000_000_000),
            ("1.5s", 1_500_000_000),
            ("6m0s", 360_000_000_000),
            ("1h2m3.5s", 3_723_500_000_000),
            ("250us", 250_000),
            ("7ns", 7),
        ] {
            assert_eq!(go_duration(text), Some(Duration::from_nanos(ns)), "{text}");
        }
        for bad in ["", "s", "5", "5x", "1..2s", "-1s", "m5"] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_draft_fields_win_over_the_legacy_ones() {
        let h = headers(&[
            ("ratelimit", r#""p";r=2;t=1"#),
            ("x-ratelimit-remaining", "9"),
        ]);
        assert_eq!(quotas(&h, 0).unwrap()[0].remaining, 2);
    }

    #[test]
    fn malformed_fields_are_errors_naming_field_and_value() {
        for (name, value) in [
            ("ratelimit", r#""p";t=1"#),
            ("ratelimit", "(a b);r=1"),
            ("ratelimit", "\"unterminated"),
            ("x-ratelimit-remaining", "-3"),
        ] {
            let e = quotas(&headers(&[(name, value)]), 0)
                .unwrap_err()
                .to_string();
            assert!(e.contains(name), "{e}");
        }
    }

    #[test]
    fn more_policies_than_are_kept_are_all_read() {
        // Five named in each field, the last ones in another order: the check keeps four.
        let policy = r#""a";q=1;w=10, "b";q=2;w=20, "c";q=3;w=30, "d";q=4;w=40, "e";q=5;w=50"#;
        let state = r#""e";r=50;t=5, "a";r=10, "b";r=20, "c";r=30, "d";r=40;t=4"#;
        let h = headers(&[("ratelimit-policy", policy), ("ratelimit", state)]);
        let q = quotas(&h, 0).unwrap();
        let read: Vec<_> = q
            .iter()
            .map(|q| {
                (
                    q.policy.as_deref().unwrap(),
                    q.remaining,
                    q.limit,
                    q.reset.as_secs(),
                )
            })
            .collect();
        assert_eq!(
            read,
            [
                ("e", 50, Some(5), 5),
                ("a", 10, Some(1), 10),
                ("b", 20, Some(2), 20),
                ("c", 30, Some(3), 30),
                ("d", 40, Some(4), 4),
            ]
        );
        // A name with an escape is read as well (owned, not borrowed).
        let h = headers(&[("ratelimit", r#""x\"y";r=1;t=2"#)]);
        assert_eq!(quotas(&h, 0).unwrap()[0].policy.as_deref(), Some("x\"y"));
    }

    /// A member's callback, as the readers below take it.
    type Each<'e> = &'e mut dyn FnMut(Cow<'_, str>, Params) -> Result<(), String>;

    /// What [`entries`] and [`entries_sfv`] hand over for `value`, or their error: `each`
    /// refuses a member named `refused`, as a caller's check does.
    fn read_by(
        value: &str,
        read: fn(&'static str, &str, Each<'_>) -> Result<(), Error>,
    ) -> Result<Vec<(String, Params)>, String> {
        let mut got = Vec::new();
        read("ratelimit", value, &mut |name, p| {
            if name == "refused" {
                return Err(format!("{name} refused"));
            }
            got.push((name.into_owned(), p));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        Ok(got)
    }

    fn by_hand_first(field: &'static str, value: &str, each: Each<'_>) -> Result<(), Error> {
        entries(field, value, each)
    }

    fn by_sfv(field: &'static str, value: &str, each: Each<'_>) -> Result<(), Error> {
        entries_sfv(field, value, each)
    }

    /// The hand-read path agrees with sfv on `value`: the same members or the same error,
    /// and a field it reads by hand is one sfv accepts.
    fn agrees_with_sfv(value: &str) {
        let sfv = read_by(value, by_sfv);
        assert_eq!(read_by(value, by_hand_first), sfv, "{value:?}");
        if let Some((members, len)) = usual(value) {
            let by_hand: Vec<_> = members[..len]
                .iter()
                .map(|(n, p)| ((*n).to_owned(), *p))
                .collect();
            if !by_hand.iter().any(|(n, _)| n == "refused") {
                assert_eq!(Ok(by_hand), sfv, "read by hand: {value:?}");
            }
        }
    }

    #[test]
    fn the_usual_shapes_are_read_by_hand_as_sfv_reads_them() {
        for value in [
            r#""per-key";r=99999999;t=1"#,
            r#""per-key";q=100000000;w=60"#,
            r#""burst";r=40;t=12, "day";r=900;t=3600"#,
            r#""a";r=1;t=2,"b";q=5;w=60,  "c";r=0"#,
            r#""";r=007;t=0;x=5;r=3"#,
            r#""sp ace!#$%&'()*+,-./:;<=>?@[]^_`{|}~";r=999999999999999"#,
            r#""a";r=1, "refused";r=2"#,
            r#""a";t=1"#,
            r#""a""#,
        ] {
            assert!(usual(value).is_some(), "read by hand: {value}");
            agrees_with_sfv(value);
        }
    }

    #[test]
    fn anything_unusual_goes_to_sfv_and_malformed_fields_are_still_errors() {
        for value in [
            "",
            " \"a\";r=1",
            "\"a\";r=1 ",
            "\"a\" ;r=1",
            "\"a\"; r=1",
            "\"a\";r=1 , \"b\";r=2",
            "\"a\";r=1,\t\"b\";r=2",
            "a;r=1",
            "\"x\\\"y\";r=1",
            "\"a\";r=-1",
            "\"a\";r=1.5;t=2",
            "\"a\";r;t=2",
            "\"a\";r=?1",
            "\"a\";r=\"1\"",
            "\"a\";r1=2",
            "\"a\";R=2",
            "\"a\";*x=2",
            "\"a\";r=1234567890123456",
            "\"a\";r=1a",
            "\"a\";r=1,",
            "\"a\";r=1,,\"b\"",
            "(\"a\" \"b\");r=1",
            "\"unterminated",
            "\"a\tb\";r=1",
            "\"a\";r=",
            "\"a\";=1",
            "\"1\";r=1, \"2\";r=2, \"3\";r=3, \"4\";r=4, \"5\";r=5",
        ] {
            assert!(usual(value).is_none(), "left to sfv: {value:?}");
            agrees_with_sfv(value);
        }
    }

    /// One of `choices`, drawn from `rng` (`below` is inclusive).
    fn pick<'c>(rng: &mut crate::SplitMix64, choices: &[&'c str]) -> &'c str {
        choices[rng.below(choices.len() as u64 - 1) as usize]
    }

    /// Fields made of the pieces servers send and the ones that break them, in any order
    /// (a seeded generator, so a failure names its field and comes back every run): mostly
    /// malformed, often usual.
    #[test]
    fn by_hand_or_by_sfv_any_string_of_pieces_reads_the_same() {
        const PIECES: &[&str] = &[
            "\"per-key\"",
            "\"a\"",
            "\"\"",
            "\"refused\"",
            "\"x\\\"y\"",
            "\"t b\"",
            "tok",
            "\"",
            ";",
            "r",
            "t",
            "q",
            "w",
            "x",
            "R",
            "*",
            "=",
            "0",
            "1",
            "42",
            "007",
            "999999999999999",
            "1234567890123456",
            "-",
            ".",
            ",",
            ", ",
            " ",
            "\t",
            "(",
            ")",
            "?1",
            "\\",
            ";r=",
            ";t=",
            "\";r=1",
        ];
        let mut rng = crate::SplitMix64::new(15);
        let mut usual_seen = 0;
        for _ in 0..50_000 {
            let len = rng.below(16);
            let field: String = (0..len).map(|_| pick(&mut rng, PIECES)).collect();
            usual_seen += usize::from(usual(&field).is_some());
            agrees_with_sfv(&field);
        }
        assert!(usual_seen > 100, "the usual shape drawn {usual_seen} times");
    }

    /// Lists of well-formed members, now and then spaced or valued unusually.
    #[test]
    fn by_hand_or_by_sfv_lists_of_members_read_the_same() {
        const NAMES: &[&str] = &["\"p\"", "\"per-key\"", "\"refused\"", "tok", "\"a\\\\b\""];
        const KEYS: &[&str] = &["r", "t", "q", "w", "pk", "x-y", "*"];
        const VALUES: &[&str] = &[
            "=0",
            "=1",
            "=60",
            "=007",
            "=999999999999999",
            "=1000000000000000",
            "=-1",
            "=1.5",
            "",
            "=?0",
            "=\"s\"",
            "=1a",
        ];
        const SEPARATORS: &[&str] = &[",", ", ", ",  ", " ,", ",\t"];
        let mut rng = crate::SplitMix64::new(15);
        let mut usual_seen = 0;
        for _ in 0..20_000 {
            let separator = pick(&mut rng, SEPARATORS);
            let members: Vec<String> = (0..1 + rng.below(6))
                .map(|_| {
                    let mut member = pick(&mut rng, NAMES).to_owned();
                    for _ in 0..rng.below(5) {
                        member.push(';');
                        member.push_str(pick(&mut rng, KEYS));
                        member.push_str(pick(&mut rng, VALUES));
                    }
                    member
                })
                .collect();
            let field = members.join(separator);
            usual_seen += usize::from(usual(&field).is_some());
            agrees_with_sfv(&field);
        }
        assert!(usual_seen > 300, "the usual shape drawn {usual_seen} times");
    }

    #[test]
    fn no_fields_no_quotas() {
        assert!(quotas(&HeaderMap::new(), 0).unwrap().is_empty());
    }
}
