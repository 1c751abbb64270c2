//! What the policy crate's test files share: an engine over the in-memory store made from a
//! config's text, a request, and the engine's calls run to completion (over an in-memory
//! store they never wait).
//!
//! Each test file compiles this module for itself and uses a part of it.
#![allow(dead_code)]

use std::net::IpAddr;

use ratewarden_core::adaptive::Completion;
use ratewarden_core::{now_or_panic, AsyncStore};
use ratewarden_memory::{MemoryStore, StoreConfig};
use ratewarden_policy::config::parse;
use ratewarden_policy::{Engine, GrantId, Owner, Request, Verdict};

/// The engine deciding the rules of `toml` in an in-memory store of the default size.
///
/// # Panics
///
/// When `toml` is not a valid config: a test's rules are meant to be.
pub fn engine(toml: &str) -> Engine<MemoryStore> {
    let config = parse("test.toml", toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    Engine::new(config, MemoryStore::new(StoreConfig::default()))
}

/// A `GET` of `path` from `peer`, with `headers` and no host, cost or named key.
pub fn request<'a>(peer: &str, path: &'a str, headers: &'a [(&'a str, &'a str)]) -> Request<'a> {
    Request {
        peer: peer.parse::<IpAddr>().expect("an address"),
        method: "GET",
        path,
        host: None,
        headers,
        cost: None,
        api_key: None,
        tenant: None,
        body: None,
        client_cert: None,
    }
}

/// `request` decided at `now`.
///
/// # Panics
///
/// When the engine refuses to decide it (a malformed request).
pub fn decide<S: AsyncStore>(engine: &Engine<S>, request: &Request<'_>, now: u64) -> Verdict {
    now_or_panic(engine.decide(request, now)).expect("a request the engine can decide")
}

/// Releases the permit `verdict` carries, by the verdict, telling adaptive rules how the
/// request went.
///
/// # Panics
///
/// When the verdict carries no permit, or the engine refuses the release.
pub fn release<S: AsyncStore>(
    engine: &Engine<S>,
    verdict: &Verdict,
    completion: Completion,
    now: u64,
) {
    let id: GrantId = verdict.permit.expect("a permit");
    now_or_panic(engine.release_with(id, Owner::Verdict(verdict), completion, now))
        .expect("released by its holder");
}
