//! OpenAI's rate limit headers, which LLM clients read (the OpenAI SDKs, LiteLLM,
//! LangChain's retry wrappers): `x-ratelimit-limit-requests`,
//! `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests`, and the same three for
//! `tokens`, the reset written as a Go duration (`6m0s`, `1s`, `20ms`).

use http::HeaderName;
use ratewarden_core::Decision;

/// Which of OpenAI's two families a rule's numbers go in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenAiFamily {
    /// `x-ratelimit-*-requests`.
    Requests,
    /// `x-ratelimit-*-tokens`.
    Tokens,
}

impl OpenAiFamily {
    /// `requests` or `tokens`, as the headers and the config spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            OpenAiFamily::Requests => "requests",
            OpenAiFamily::Tokens => "tokens",
        }
    }

    /// The family named `text` (`requests`, `tokens`).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "requests" => Some(OpenAiFamily::Requests),
            "tokens" => Some(OpenAiFamily::Tokens),
            _ => None,
        }
    }

    fn names(self) -> [HeaderName; 3] {
        match self {
            OpenAiFamily::Requests => [
                HeaderName::from_static("x-ratelimit-limit-requests"),
                HeaderName::from_static("x-ratelimit-remaining-requests"),
                HeaderName::from_static("x-ratelimit-reset-requests"),
            ],
            OpenAiFamily::Tokens => [
                HeaderName::from_static("x-ratelimit-limit-tokens"),
                HeaderName::from_static("x-ratelimit-remaining-tokens"),
                HeaderName::from_static("x-ratelimit-reset-tokens"),
            ],
        }
    }
}

/// The three headers of `family` for `decision`: its limit, what remains (0 while in
/// debt), and how long until it is whole again.
///
/// # Examples
///
/// ```
/// use ratewarden_core::{Decision, Outcome};
/// use ratewarden_http::{openai_headers, OpenAiFamily};
///
/// let decision = Decision::new(Outcome::Allowed, 1_000_000, 999_500, 360_000_000_000);
/// let headers = openai_headers(OpenAiFamily::Tokens, &decision);
/// assert_eq!(headers[0].0.as_str(), "x-ratelimit-limit-tokens");
/// assert_eq!(headers[1].1, "999500");
/// assert_eq!(headers[2].1, "6m0s");
/// ```
pub fn openai_headers(family: OpenAiFamily, decision: &Decision) -> [(HeaderName, String); 3] {
    let [limit, remaining, reset] = family.names();
    [
        (limit, decision.limit.to_string()),
        (remaining, decision.remaining.to_string()),
        (reset, go_duration(decision.reset_after_ns)),
    ]
}

/// `ns` as Go's `time.Duration` prints it, to the millisecond, rounded up (a client that
/// waits it never comes back early): `0s`, `20ms`, `1s`, `1.5s`, `6m0s`, `1h0m0s`.
///
/// # Examples
///
/// ```
/// use ratewarden_http::go_duration;
///
/// assert_eq!(go_duration(0), "0s");
/// assert_eq!(go_duration(19_000_001), "20ms");
/// assert_eq!(go_duration(1_500_000_000), "1.5s");
/// assert_eq!(go_duration(3_723_000_000_000), "1h2m3s");
/// ```
pub fn go_duration(ns: u64) -> String {
    let ms = ns.div_ceil(1_000_000);
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (hours, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let (seconds, millis) = (rest / 1000, rest % 1000);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&seconds.to_string());
    if millis > 0 {
        let fraction = format!("{millis:03}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    out.push('s');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_writes_them() {
        for (ns, text) in [
            (1, "1ms"),
            (999_000_000, "999ms"),
            (1_000_000_000, "1s"),
            (1_020_000_000, "1.02s"),
            (60_000_000_000, "1m0s"),
            (61_001_000_000, "1m1.001s"),
            (3_600_000_000_000, "1h0m0s"),
            (86_400_000_000_000, "24h0m0s"),
        ] {
            assert_eq!(go_duration(ns), text, "{ns}");
        }
    }
}
