//! `ratewarden explain`: what every rule of a config would do with one request, and why,
//! charging nothing; and the same explanation as JSON, which the admin listener's
//! `POST /v1/explain` answers against the live state.

use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;

use ratewarden_core::{AsyncStore, RealClock};
use ratewarden_policy::{Engine, Explanation, Rule};

use crate::check_config::load_or_report;
use crate::describe::explanation::{to_json, to_text};
use crate::serve::CheckBody;

/// Explains `request` (a `/v1/check` body) against the rules of `path`, on a store as the
/// config's `[store]` says: a shared store's live state, or a fresh in-memory one. Prints
/// text, or with `json` the admin API's JSON.
///
/// # Errors
///
/// A shared store that cannot be built, or standard output that cannot be written.
pub fn main(path: &Path, request: &str, json: bool) -> anyhow::Result<ExitCode> {
    let Some(config) = load_or_report(path) else {
        return Ok(ExitCode::from(1));
    };
    let body = match CheckBody::parse(request.as_bytes()) {
        Ok(body) => body,
        Err(problem) => {
            eprintln!("error: --request: {}", problem.detail);
            return Ok(ExitCode::from(1));
        }
    };
    // Without `ip`, the request is a local one, as the decision API takes its caller's.
    let peer = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let resolved = match body.resolve(peer) {
        Ok(resolved) => resolved,
        Err(problem) => {
            eprintln!("error: --request: {}", problem.detail);
            return Ok(ExitCode::from(1));
        }
    };
    let now = ratewarden_core::Clock::now(&RealClock::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let shared = crate::serve::store::shared_store(&config.store)?;
    let (explained, rules) = match shared {
        Some(redis) => runtime.block_on(explain(config, redis, &resolved.request(), now)),
        None => {
            let memory = ratewarden_memory::MemoryStore::new(Default::default());
            runtime.block_on(explain(config, memory, &resolved.request(), now))
        }
    };
    let mut out = io::stdout().lock();
    if json {
        writeln!(out, "{:#}", to_json(&explained, &rules))?;
    } else {
        write!(out, "{}", to_text(&explained, &rules))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn explain<S: AsyncStore>(
    config: ratewarden_policy::Config,
    store: S,
    request: &ratewarden_policy::Request<'_>,
    now: u64,
) -> (Explanation, Vec<Rule>) {
    let engine = Engine::new(config, store);
    (engine.explain(request, now).await, engine.rules())
}
