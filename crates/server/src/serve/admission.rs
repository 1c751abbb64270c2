//! The one admission pipeline every front door hands its request to.
//!
//! A door parses what it was asked into a [`ratewarden_policy::Request`] (or, for Envoy's
//! rate limit service, descriptors) and calls [`admit`], which takes a place in flight
//! (critical routes first, the same rule at every door), refuses what the door cannot
//! enforce, decides, times the decision, and turns the verdict into the contract's answer.
//! The door then only renders the [`Admission`] in its own protocol.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::StatusCode;
use ratewarden_core::{Limit, NANOS_PER_SEC};
use ratewarden_policy::{
    Answer, Request, RequestDescriptor, RequestError, ServerSettings, Verdict,
};

use super::app::App;
use super::shed::Slot;

/// What a door asks about.
pub(crate) enum Ask<'a> {
    /// An HTTP request, as every door but Envoy's rate limit service describes one.
    Request(&'a Request<'a>),
    /// Envoy's rate limit descriptors (`ShouldRateLimit`, `POST /json`).
    Descriptors {
        domain: &'a str,
        descriptors: &'a [RequestDescriptor<'a>],
        hits: u64,
    },
}

/// What a front door can do with a decided request beyond answering it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Door {
    /// How logs name it.
    pub(crate) name: &'static str,
    /// Whether it learns when the request ends, so that a concurrency rule's permit taken
    /// for it is given back: the gateway (when the answer is relayed) and the decision API
    /// (the caller's `/v1/release`) do; a proxy asking through forward-auth or `ext_authz`
    /// never says, so a concurrency rule is refused there, naming it, rather than turned
    /// silently into "N per lease".
    pub(crate) ends: bool,
    /// Whether it may hold the request in an adaptive rule's queue until its turn: only
    /// the gateway, which holds the request anyway.
    pub(crate) waits: bool,
}

/// The gateway, through hyper or its lean path.
pub(crate) const GATEWAY: Door = Door {
    name: "gateway",
    ends: true,
    waits: true,
};
/// The decision API's `POST /v1/check`, through hyper or its lean path.
pub(crate) const CHECK: Door = Door {
    name: "/v1/check",
    ends: true,
    waits: false,
};
/// Forward-auth: `/v1/auth`, `/v1/auth/nginx`, `/v1/auth/envoy/…`.
pub(crate) const FORWARD_AUTH: Door = Door {
    name: "forward-auth",
    ends: false,
    waits: false,
};
/// Envoy's external authorization over gRPC.
pub(crate) const EXT_AUTHZ: Door = Door {
    name: "ext_authz",
    ends: false,
    waits: false,
};
/// Envoy's rate limit service over gRPC, and its HTTP face `POST /json`.
pub(crate) const RLS: Door = Door {
    name: "ShouldRateLimit",
    ends: true,
    waits: false,
};

/// What became of a request at the door.
pub(crate) enum Ruling {
    /// Every place in flight is taken: the contract's 503, for the door to render.
    Shed(ratewarden_http::Response),
    /// Not decided: the request cannot be read one way (400), asks what a rule cannot
    /// give (422), or meets a rule this door cannot enforce (500).
    Undecided(Undecided),
    /// Decided.
    Decided(Decided),
}

/// Why a request was not decided: what its sender (or the proxy's operator) must fix.
pub(crate) struct Undecided {
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
}

impl Undecided {
    fn of(error: &RequestError) -> Self {
        Self {
            status: request_error_status(error),
            detail: error.to_string(),
        }
    }
}

/// A decided request: the verdict, the contract's answer to it, and the place in flight,
/// held until the door drops it (after relaying the answer, for the gateway).
pub(crate) struct Decided {
    pub(crate) verdict: Verdict,
    pub(crate) answer: Answer,
    pub(crate) slot: Slot,
}

/// The one way a request is admitted: a place in flight, the door's own refusals, the
/// decision (waiting in a rule's queue where the door can), its timing, and the answer.
/// A client that goes away meanwhile drops this future, and with it the place and any
/// place in a rule's queue.
pub(crate) async fn admit(
    app: &Arc<App>,
    door: Door,
    ask: Ask<'_>,
    settings: &ServerSettings,
) -> Ruling {
    let critical = match ask {
        Ask::Request(request) => settings.critical.iter().any(|m| m.matches(request)),
        Ask::Descriptors { .. } => false,
    };
    let slot = match enter(app, critical).await {
        Ok(slot) => slot,
        Err(shed) => return Ruling::Shed(shed),
    };
    if let Ask::Request(request) = ask {
        if !door.ends {
            if let Some(undecided) = unenforceable(app, door, request) {
                return Ruling::Undecided(undecided);
            }
        }
    }
    // One reading of the clock for both the decision and its timing.
    let started = app.clock.now();
    let decided = match ask {
        Ask::Request(request) if door.waits => {
            let timer = ratewarden_policy::ClockTimer(&*app.clock);
            app.engine.decide_waiting_at(request, started, &timer).await
        }
        Ask::Request(request) => app.engine.decide(request, started).await,
        Ask::Descriptors {
            domain,
            descriptors,
            hits,
        } => {
            app.engine
                .decide_descriptors(domain, descriptors, hits, started)
                .await
        }
    };
    let verdict = match decided {
        Ok(verdict) => verdict,
        Err(e) => return Ruling::Undecided(Undecided::of(&e)),
    };
    app.metrics
        .decision_seconds
        .observe(app.clock.now().saturating_sub(started) as f64 / 1e9);
    let answer = app.answer_with(&verdict, settings);
    Ruling::Decided(Decided {
        verdict,
        answer,
        slot,
    })
}

/// A place in flight, critical requests first (they may take the last `critical_reserve`
/// places), or the contract's 503 when none frees within `[server] queue_timeout`. What
/// [`admit`] takes, and what the calls that decide nothing (`/v1/settle`, `/v1/release`)
/// take alone.
pub(crate) async fn enter(
    app: &Arc<App>,
    critical: bool,
) -> Result<Slot, ratewarden_http::Response> {
    match app.shedder.enter(critical).await {
        Some(slot) => Ok(slot),
        None => {
            app.metrics.shed("in_flight");
            Err(ratewarden_http::unavailable(
                app.jittered(NANOS_PER_SEC),
                "the server is at capacity",
            ))
        }
    }
}

/// One status per meaning, at every door (docs/decision-api.md, "Errors"): a request that
/// cannot be read one way only is a 400, a well-formed one asking too much a 422.
pub(crate) fn request_error_status(error: &RequestError) -> StatusCode {
    if error.is_malformed() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    }
}

/// The rule set version whose concurrency rule was last logged as refused at a door that
/// never hears a request end (0: none; versions start at 1).
static WARNED: AtomicU64 = AtomicU64::new(0);

/// A 500 naming the concurrency rule that applies to `request`, if one does, at a door that
/// could never give its permit back. Rules are filtered by kind first: most configs have
/// none, and then nothing is matched twice.
fn unenforceable(app: &App, door: Door, request: &Request<'_>) -> Option<Undecided> {
    let name = app
        .engine
        .rule_list()
        .iter()
        .filter(|rule| matches!(rule.limit, Limit::Concurrency(_)))
        .find(|rule| rule.matches.matches(request))
        .map(|rule| rule.name.clone())?;
    // Once per rule set: every request it matches is refused, and the log must not carry
    // each of them.
    let version = app.engine.version();
    if WARNED.swap(version, Ordering::Relaxed) != version {
        tracing::error!(
            rule = name,
            version,
            door = door.name,
            "a concurrency rule applies to requests a proxy asks about; they are refused (500)"
        );
    }
    Some(Undecided {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        detail: format!(
            "rule `{name}` is a concurrency limit, and a proxy asking through {} never says \
             when the request it forwards ends, so its permit could not be given back; limit \
             concurrency at the gateway (`[server] upstream`) or narrow the rule's `match` so \
             that it does not apply to requests checked this way",
            door.name
        ),
    })
}
