//! Which HTTP requests a rule's `match` takes.

use super::Request;
use crate::config::{BucketMatch, Match};

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
    /// (`*` a glob), or the rule names no descriptor and takes them all. A rule of quota
    /// buckets (`match.bucket`) takes no descriptor: one check, for the hot path.
    pub(crate) fn matches_descriptor(&self, domain: &str, entries: &[(&str, &str)]) -> bool {
        if self.bucket.is_some() || self.domain.as_deref() != Some(domain) {
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

    /// Whether an Envoy quota bucket of `domain` whose id is `entries` is this rule's: by
    /// `match.bucket` when the rule has one, else as a descriptor of those entries in key
    /// order would be (rules written for descriptors take buckets as they always have).
    pub(crate) fn matches_bucket(&self, domain: &str, entries: &[(&str, &str)]) -> bool {
        match &self.bucket {
            Some(bucket) => self.domain.as_deref() == Some(domain) && bucket.matches(entries),
            None => self.matches_descriptor(domain, entries),
        }
    }
}

impl BucketMatch {
    /// Whether a bucket id of `entries` holds every entry of the match: its key with the
    /// value given (`*` a glob), or any value for a bare key; in any order, among others.
    ///
    /// # Examples
    ///
    /// ```
    /// use ratewarden_policy::BucketMatch;
    ///
    /// let m = BucketMatch {
    ///     entries: vec![("name".into(), Some("api-*".into())), ("tier".into(), None)],
    ///     weights: vec![("tier".into(), "gold".into(), 3)],
    /// };
    /// assert!(m.matches(&[("tier", "free"), ("name", "api-v1"), ("region", "eu")]));
    /// assert!(!m.matches(&[("name", "api-v1")]));
    /// assert_eq!(m.weight(&[("name", "api-v1"), ("tier", "gold")]), 3);
    /// assert_eq!(m.weight(&[("name", "api-v1"), ("tier", "free")]), 1);
    /// ```
    pub fn matches(&self, entries: &[(&str, &str)]) -> bool {
        self.entries.iter().all(|(k, v)| {
            entries.iter().any(|(key, value)| {
                k == key && v.as_deref().is_none_or(|p| crate::envoy::glob(p, value))
            })
        })
    }

    /// A bucket's weight in the split of its budget: the largest of the weights whose
    /// `key=value` its id holds exactly, 1 when it holds none.
    pub fn weight(&self, entries: &[(&str, &str)]) -> u64 {
        self.weights
            .iter()
            .filter(|(k, v, _)| entries.iter().any(|(key, value)| k == key && v == value))
            .map(|(_, _, w)| *w)
            .max()
            .unwrap_or(1)
    }
}
