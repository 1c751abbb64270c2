//! Which request headers decide who a request is under a rule set, worked out once when
//! the rule set is built (and at each reload), so a request reads it without a copy.

use crate::config::{Config, Cost, KeyPart, Match, Rule};
use crate::ip::TrustedProxies;

/// The headers whose value decides who a request is (or what it costs, or which rules it
/// meets) under the rules in force, and the proxies whose forwarding headers are believed.
///
/// A front door that forwards requests (the gateway) must hand these to the upstream
/// exactly as they were decided on: never stripped because `Connection` names them, never
/// twice so that the limiter counts one line and the upstream reads the other.
///
/// # Examples
///
/// ```
/// use ratewarden_memory::{MemoryStore, StoreConfig};
/// use ratewarden_policy::{config, Engine};
///
/// let rules = "[[limit]]\nname = \"per-team\"\nkey = [\"header:X-Team\"]\n\
///              algorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\n";
/// let engine: Engine<MemoryStore> = Engine::new(
///     config::parse("r.toml", "").unwrap(),
///     MemoryStore::new(StoreConfig::default()),
/// );
/// assert!(!engine.identity().decides("x-team"));
/// engine.reload(config::parse("r.toml", rules).unwrap());
/// assert!(engine.identity().decides("x-team"));
/// assert!(engine.identity().decides("authorization"), "always");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Lowercase, sorted, once each.
    names: Box<[String]>,
    trusted: TrustedProxies,
}

/// Headers that decide who a request is whatever the rules say: what the engine reads of
/// every request (the bearer token, the host, the forwarding headers), and what an upstream
/// commonly reads of the client (`X-Api-Key`, say, while the rules key on
/// `Authorization`).
const ALWAYS: [&str; 8] = [
    "authorization",
    "host",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "x-api-key",
];

impl Identity {
    /// The identity headers of `config`'s sections and of `rules` (a rule set keeps its
    /// rules apart from its config).
    pub(crate) fn of(config: &Config, rules: &[Rule]) -> Self {
        let mut names: Vec<String> = ALWAYS.map(str::to_owned).into();
        names.extend(config.keys.api_key_header.clone());
        names.push(config.keys.tenant_header.clone());
        names.push(config.trusted_proxies.header().name().to_owned());
        let mut matcher = |m: &Match| names.extend(m.header.as_ref().map(|(h, _)| h.clone()));
        for rule in rules {
            matcher(&rule.matches);
        }
        for m in &config.server.critical {
            matcher(m);
        }
        for rule in rules {
            names.extend(rule.key.iter().filter_map(|part| match part {
                KeyPart::Header(h) => Some(h.clone()),
                _ => None,
            }));
            if let Cost::Header { name, .. } = &rule.cost {
                names.push(name.clone());
            }
        }
        for name in &mut names {
            name.make_ascii_lowercase();
        }
        names.sort_unstable();
        names.dedup();
        Self {
            names: names.into(),
            trusted: config.trusted_proxies.clone(),
        }
    }

    /// Whether the header `name` (lowercase, as `http::HeaderName` spells it) decides who
    /// a request is.
    pub fn decides(&self, name: &str) -> bool {
        self.names
            .binary_search_by(|n| n.as_str().cmp(name))
            .is_ok()
    }

    /// The identity headers, lowercase and sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The proxies whose forwarding header is believed (`[server] trusted_proxies`), and
    /// which header that is (`[server] client_ip_header`).
    pub fn trusted(&self) -> &TrustedProxies {
        &self.trusted
    }
}
