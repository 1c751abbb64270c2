//! Which HTTP requests a rule's `match` takes.

use super::Request;
use crate::config::Match;

impl Match {
    /// Whether `request` meets every condition given.
    pub fn matches(&self, request: &Request<'_>) -> bool {
        // Rules of an Envoy domain are for descriptors, not HTTP requests.
        if self.domain.is_some() {
            return false;
        }
        if let Some(method) = &self.method {
            if !request.method.eq_ignore_ascii_case(method) {
                return false;
            }
        }
        if let Some(path) = &self.path {
            // Aliases by case and trailing slash reach the same page on many upstreams: a
            // limiter errs towards limiting, unless the rule says its upstream tells them
            // apart.
            let hit = match (path.strip_suffix('*'), self.path_exact) {
                (Some(prefix), true) => request.path.starts_with(prefix),
                (None, true) => request.path == path,
                (Some(prefix), false) => crate::path::path_under(request.path, prefix),
                (None, false) => crate::path::same_path(request.path, path),
            };
            if !hit {
                return false;
            }
        }
        if let Some(host) = &self.host {
            // Every spelling a server routes to the host: case, a trailing dot, the port.
            if !request.host.is_some_and(|h| crate::host::names(h, host)) {
                return false;
            }
        }
        if let Some((name, value)) = &self.header {
            match (request.header(name), value) {
                (None, _) => return false,
                (Some(given), Some(want)) if given != want => return false,
                _ => {}
            }
        }
        true
    }

    /// Whether a descriptor of `domain` with `entries` is this rule's: the domain is the
    /// rule's, and the entries are the rule's keys in order with their values when given
    /// (`*` a glob), or the rule names no descriptor and takes them all.
    pub(super) fn matches_descriptor(&self, domain: &str, entries: &[(&str, &str)]) -> bool {
        if self.domain.as_deref() != Some(domain) {
            return false;
        }
        self.descriptor.is_empty()
            || (self.descriptor.len() == entries.len()
                && self
                    .descriptor
                    .iter()
                    .zip(entries)
                    .all(|((k, v), (key, value))| {
                        k == key && v.as_deref().is_none_or(|p| crate::envoy::glob(p, value))
                    }))
    }
}
