//! `[server] admin_token_file`, `admin_insecure` and `admin_hosts`: who may use the admin
//! listener, and which names it answers to.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;

use ring::digest::{digest, SHA256};
use toml::Spanned;

use super::error::Errors;

/// The environment variable that may hold the admin listener's bearer token, for
/// deployments that hand secrets over as variables rather than files.
pub const ADMIN_TOKEN_ENV: &str = "RATEWARDEN_ADMIN_TOKEN";

/// The shortest token taken: a guessable one would protect nothing on a network.
pub const MIN_ADMIN_TOKEN: usize = 16;

/// The admin listener's bearer token, kept only as its SHA-256 digest: the token itself is
/// never held, so no `Debug`, log line or core dump of the settings can show it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken {
    digest: [u8; 32],
    /// Where it came from, for the start log line and `check-config`.
    source: String,
}

impl AdminToken {
    /// The token `text` (already trimmed), read from `source`.
    fn new(text: &str, source: String) -> Self {
        Self {
            digest: sha256(text.as_bytes()),
            source,
        }
    }

    /// Whether `presented` is the token, compared in time that does not depend on where
    /// they differ (digests of equal length, every byte compared), so that a client cannot
    /// learn the token a byte at a time from how fast it is refused.
    pub fn verify(&self, presented: &str) -> bool {
        let presented = sha256(presented.as_bytes());
        let differ = self
            .digest
            .iter()
            .zip(presented.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(differ) == 0
    }

    /// Where the token was read: `file /path` or `environment RATEWARDEN_ADMIN_TOKEN`.
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AdminToken(from {}, redacted)", self.source)
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

/// How the admin listener is protected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminAccess {
    /// The bearer token every admin request but `/live`, `/ready` and the dashboard's own
    /// files must carry; `None` for an open listener (loopback, or `admin_insecure`).
    pub token: Option<AdminToken>,
    /// `admin_token_file` as written, for the reload to read again.
    pub token_file: Option<PathBuf>,
    /// The operator serves a non-loopback listener without a token on purpose.
    pub insecure: bool,
    /// Names besides IP addresses and `localhost` that requests may carry in `Host`
    /// (lower case, no port): the names the operator reaches the listener by.
    pub hosts: Vec<String>,
}

impl AdminAccess {
    /// Whether an admin listener at `admin` is left open to whoever reaches it: off
    /// loopback, with no token and no explicit `admin_insecure`.
    pub fn leaves_open(&self, admin: Option<SocketAddr>) -> bool {
        admin.is_some_and(|a| !a.ip().to_canonical().is_loopback())
            && self.token.is_none()
            && !self.insecure
    }

    /// Whether `host` (a `Host` header's name, port stripped) is one the listener answers:
    /// an IP address, `localhost`, or a name in `admin_hosts`. A DNS name anyone else
    /// controls can be rebound to this address, and a page under it would then read this
    /// listener as its own origin; addresses and these names cannot.
    pub fn answers_to(&self, host: &str) -> bool {
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let name = name.strip_suffix('.').unwrap_or(name);
        name.eq_ignore_ascii_case("localhost")
            || name.parse::<std::net::IpAddr>().is_ok()
            || self.hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
    }
}

/// The raw fields, taken out of `RawServer` together.
pub(super) struct RawAdmin {
    pub(super) token_file: Option<Spanned<String>>,
    pub(super) insecure: Option<Spanned<bool>>,
    pub(super) hosts: Vec<Spanned<String>>,
}

/// Validates the admin fields for a listener at `admin` (written at `admin_span`), reading
/// the token from its file or from [`ADMIN_TOKEN_ENV`].
pub(super) fn admin_access(
    raw: RawAdmin,
    admin: Option<SocketAddr>,
    admin_span: Option<Range<usize>>,
    errors: &mut Errors<'_>,
) -> AdminAccess {
    let from_env = std::env::var(ADMIN_TOKEN_ENV);
    let mut token = None;
    let mut token_file = None;
    match (&raw.token_file, &from_env) {
        (Some(file), Ok(_)) => errors.at(
            Some(file.span()),
            None,
            format!(
                "`[server]`: `admin_token_file` and the {ADMIN_TOKEN_ENV} environment variable \
                 both give the admin token; keep one"
            ),
        ),
        (Some(file), Err(_)) => {
            let path = PathBuf::from(file.get_ref().trim());
            match std::fs::read_to_string(&path) {
                Ok(text) => match token_problem(&text) {
                    None => {
                        token = Some(AdminToken::new(
                            text.trim(),
                            format!("file {}", path.display()),
                        ));
                    }
                    Some(problem) => errors.at(
                        Some(file.span()),
                        None,
                        format!(
                            "`[server]`: `admin_token_file` {}: the token {problem}",
                            path.display()
                        ),
                    ),
                },
                Err(e) => errors.at(
                    Some(file.span()),
                    None,
                    format!(
                        "`[server]`: `admin_token_file`: cannot read {}: {e}",
                        path.display()
                    ),
                ),
            }
            token_file = Some(path);
        }
        (None, Ok(text)) => match token_problem(text) {
            None => {
                token = Some(AdminToken::new(
                    text.trim(),
                    format!("environment {ADMIN_TOKEN_ENV}"),
                ));
            }
            Some(problem) => errors.at(
                None,
                None,
                format!("the {ADMIN_TOKEN_ENV} environment variable: the token {problem}"),
            ),
        },
        (None, Err(std::env::VarError::NotUnicode(_))) => errors.at(
            None,
            None,
            format!("the {ADMIN_TOKEN_ENV} environment variable is not UTF-8"),
        ),
        (None, Err(std::env::VarError::NotPresent)) => {}
    }
    let mut hosts = Vec::new();
    for host in raw.hosts {
        let name = host.get_ref().trim().to_ascii_lowercase();
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if valid {
            hosts.push(name);
        } else {
            errors.at(
                Some(host.span()),
                None,
                format!(
                    "`[server]`: `admin_hosts`: `{}` is not a DNS name (letters, digits, `-` \
                     and `.`, no port: IP addresses and `localhost` are always answered)",
                    host.get_ref()
                ),
            );
        }
    }
    let access = AdminAccess {
        token,
        token_file,
        insecure: raw.insecure.as_ref().is_some_and(|i| *i.get_ref()),
        hosts,
    };
    // A token that failed to load was already reported where it was written.
    if access.leaves_open(admin) && raw.token_file.is_none() && from_env.is_err() {
        let shown = admin.map(|a| a.to_string()).unwrap_or_default();
        errors.at(
            admin_span,
            None,
            format!(
                "`[server]`: `admin` ({shown}) is off loopback with no credential: anyone who \
                 reaches it could reset their own limits or reload the config. Set \
                 `admin_token_file` (or the {ADMIN_TOKEN_ENV} environment variable) to require \
                 a bearer token, keep `admin` on 127.0.0.1, or set `admin_insecure = true` to \
                 serve it open on purpose"
            ),
        );
    }
    access
}

/// What is wrong with a token as read (before trimming), if anything.
fn token_problem(text: &str) -> Option<String> {
    let token = text.trim();
    if token.len() < MIN_ADMIN_TOKEN {
        return Some(format!(
            "is {} characters long; it takes at least {MIN_ADMIN_TOKEN} (such as the output \
             of `openssl rand -hex 32`)",
            token.len()
        ));
    }
    // It travels in `Authorization: Bearer <token>`, so it must be one visible word.
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Some(
            "must be one word of visible ASCII characters, to be sent in an \
             `Authorization: Bearer` header"
                .to_owned(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_verified_whole_and_never_shown() {
        let token = AdminToken::new("0123456789abcdef-secret", "file t".to_owned());
        assert!(token.verify("0123456789abcdef-secret"));
        assert!(!token.verify("0123456789abcdef-secreT"));
        assert!(!token.verify("0123456789abcdef-secret "));
        assert!(!token.verify(""));
        let shown = format!("{token:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn only_addresses_localhost_and_named_hosts_are_answered() {
        let access = AdminAccess {
            hosts: vec!["admin.internal".to_owned()],
            ..AdminAccess::default()
        };
        for host in [
            "127.0.0.1",
            "[::1]",
            "10.1.2.3",
            "localhost",
            "LOCALHOST",
            "localhost.",
        ] {
            assert!(access.answers_to(host), "{host}");
        }
        assert!(access.answers_to("Admin.Internal"));
        for host in [
            "evil.example",
            "127.0.0.1.nip.io",
            "localhost.evil.example",
            "",
        ] {
            assert!(!access.answers_to(host), "{host}");
        }
    }

    #[test]
    fn loopback_listeners_are_not_left_open() {
        let open = AdminAccess::default();
        let at = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
        assert!(!open.leaves_open(at("127.0.0.1:9090")));
        assert!(!open.leaves_open(at("[::1]:9090")));
        assert!(!open.leaves_open(at("[::ffff:127.0.0.1]:9090")));
        assert!(!open.leaves_open(None));
        assert!(open.leaves_open(at("0.0.0.0:9090")));
        assert!(open.leaves_open(at("[::]:9090")));
        assert!(open.leaves_open(at("10.0.0.5:9090")));
        let insecure = AdminAccess {
            insecure: true,
            ..AdminAccess::default()
        };
        assert!(!insecure.leaves_open(at("0.0.0.0:9090")));
    }
}
