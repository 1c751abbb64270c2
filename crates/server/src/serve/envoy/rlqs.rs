//! Envoy's rate limit quota service (`StreamRateLimitQuotas`): each Envoy streams usage
//! reports per bucket; each bucket a native rule takes (by `match.bucket`, or as a
//! descriptor of the report's domain) is answered with a token bucket, the Envoys' shares
//! of the rule's rate split max-min by the demand each reports. With a shared store the
//! rate is split across every ratewarden serving it: each leases its share from the store
//! ([`FleetBoard`]). A bucket no rule takes, or one past `[envoy] max_quota_buckets`, is
//! abandoned (the Envoy falls back to its own `no_assignment_behavior`).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};
use ratewarden_core::AsyncStore as _;
use ratewarden_policy::config::CallBounds;
use ratewarden_policy::quota::{Assignment, FleetBoard, Report, Usage, RENEW_EVERY};
use tokio::sync::{mpsc, watch};
use tonic::codegen::tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::serve::admission;
use crate::serve::app::App;

/// Answers queued for one Envoy before it reads them; past it an answer is dropped (the
/// Envoy's next report is answered afresh, and its last assignment holds until its TTL).
const QUEUED: usize = 64;

type Sender = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

/// The service, over the server's engine: one board shared by every stream.
pub(crate) struct Rlqs {
    pub(crate) app: Arc<App>,
    pub(crate) stop: watch::Receiver<bool>,
    shared: Arc<Shared>,
}

struct Shared {
    board: FleetBoard,
    streams: Mutex<HashMap<u64, Sender>>,
    next: AtomicU64,
}

impl Rlqs {
    /// The service for `app`; its streams end when `stop` changes. With a shared store a
    /// task asks for this process's shares every [`RENEW_EVERY`] until then.
    pub(crate) fn new(app: Arc<App>, stop: watch::Receiver<bool>) -> Self {
        let shared = Arc::new(Shared {
            board: FleetBoard::new(member_name()),
            streams: Mutex::default(),
            next: AtomicU64::new(0),
        });
        if app.engine.store().is_shared() {
            let (app, shared, mut stop) = (Arc::clone(&app), Arc::clone(&shared), stop.clone());
            tokio::spawn(async move {
                let mut every = tokio::time::interval(RENEW_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = every.tick() => {}
                        _ = stop.changed() => break,
                    }
                    let sent = shared
                        .board
                        .renew_all(app.engine.store(), app.clock.now())
                        .await;
                    shared.send(&app, by_stream(sent));
                }
            });
        }
        Self { app, stop, shared }
    }
}

/// This process's name among the fleet's: its process id and a random number, so that
/// a restarted process (whose old leases may not have lapsed yet) is a new member.
fn member_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{}-{random:016x}", std::process::id())
}

/// The answers of one stream, as tonic reads them.
pub(crate) struct Answers(mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>);

impl Stream for Answers {
    type Item = Result<RateLimitQuotaResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = Answers;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Answers>, Status> {
        // Reports move every Envoy's share: only our Envoys may stream them.
        super::only_our_envoys(
            &self.app,
            request.remote_addr().map(|a| a.ip()),
            "StreamRateLimitQuotas",
        )?;
        let id = self.shared.next.fetch_add(1, Ordering::Relaxed);
        self.app.metrics.quota_stream(true);
        let (tx, rx) = mpsc::channel(QUEUED);
        lock(&self.shared.streams).insert(id, tx);
        let (app, shared, mut stop) = (
            Arc::clone(&self.app),
            Arc::clone(&self.shared),
            self.stop.clone(),
        );
        let mut reports = request.into_inner();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    next = reports.message() => next,
                    _ = stop.changed() => break,
                };
                match next {
                    Ok(Some(report)) => {
                        if let Err(status) = within_bounds(&app.settings().envoy, &report) {
                            // A stream past the bounds ends with the reason; its shares go.
                            if let Some(tx) = lock(&shared.streams).get(&id) {
                                let _ = tx.try_send(Err(status));
                            }
                            break;
                        }
                        // A report is work like a request: it takes a place in flight, and
                        // is dropped when none is left (counted as shed). The Envoy keeps
                        // its assignments until their time to live, and its next report
                        // is answered afresh.
                        let Ok(_slot) = admission::enter(&app, false).await else {
                            continue;
                        };
                        shared.answer(&app, id, report).await;
                    }
                    // The stream ended (or broke): that Envoy is gone.
                    Ok(None) | Err(_) => break,
                }
            }
            shared.leave(&app, id).await;
            app.metrics.quota_stream(false);
        });
        Ok(Response::new(Answers(rx)))
    }
}

impl Shared {
    /// Records one message of reports from stream `id` and sends every assignment it
    /// changes (to this stream and to the others sharing its budgets).
    async fn answer(&self, app: &App, id: u64, reports: RateLimitQuotaUsageReports) {
        let now = app.clock.now();
        let max = app.settings().envoy.max_quota_buckets;
        let mut fresh = 0;
        let mut abandoned = Vec::new();
        let mut usages = Vec::new();
        for usage in reports.bucket_quota_usages {
            let Some(bucket_id) = usage.bucket_id else {
                continue;
            };
            let mut entries: Vec<(String, String)> = bucket_id.bucket.into_iter().collect();
            entries.sort();
            let borrowed: Vec<(&str, &str)> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let Some(found) = app.engine.quota_budget(&reports.domain, &borrowed) else {
                abandoned.push(entries);
                continue;
            };
            // Envoy builds bucket ids from requests: past `[envoy] max_quota_buckets` a new
            // one is abandoned, not held (nor leased) here. This message's new ones count.
            if !self.board.holds(id, &found.budget.key, &entries) {
                if !self.board.has_room(max.saturating_sub(fresh), now) {
                    abandoned.push(entries);
                    continue;
                }
                fresh += 1;
            }
            let elapsed = usage.time_elapsed.map_or(std::time::Duration::ZERO, |d| {
                std::time::Duration::new(
                    u64::try_from(d.seconds).unwrap_or(0),
                    u32::try_from(d.nanos).unwrap_or(0),
                )
            });
            let report = Report {
                bucket: entries,
                requests: usage
                    .num_requests_allowed
                    .saturating_add(usage.num_requests_denied),
                elapsed,
                weight: found.weight,
            };
            usages.push(Usage {
                fallback: found.fallback,
                budget: found.budget,
                report,
            });
        }
        let sent = self.board.report(app.engine.store(), id, usages, now).await;
        let mut by_stream = by_stream(sent);
        for bucket in abandoned {
            let action = BucketAction {
                bucket_id: Some(bucket_id(bucket)),
                bucket_action: Some(Action::AbandonAction(AbandonAction {})),
            };
            match by_stream.iter_mut().find(|(stream, _)| *stream == id) {
                Some((_, actions)) => actions.push(action),
                None => by_stream.push((id, vec![action])),
            }
        }
        self.send(app, by_stream);
    }

    /// Forgets stream `id` and sends the others their grown shares.
    async fn leave(&self, app: &App, id: u64) {
        lock(&self.streams).remove(&id);
        let grown = self
            .board
            .leave(app.engine.store(), id, app.clock.now())
            .await;
        self.send(app, by_stream(grown));
    }

    /// Sends each stream its actions, one message each, in order: the streams whose shares
    /// shrink before those whose shares grow.
    fn send(&self, app: &App, by_stream: Messages) {
        let streams = lock(&self.streams);
        for (stream, bucket_action) in by_stream {
            if let Some(tx) = streams.get(&stream) {
                for action in &bucket_action {
                    app.metrics.quota_action(action_name(action));
                }
                // A full queue drops this answer: the next report is answered afresh.
                let _ = tx.try_send(Ok(RateLimitQuotaResponse { bucket_action }));
            }
        }
    }
}

/// What an action does, as `ratewarden_quota_actions_total` labels it.
fn action_name(action: &BucketAction) -> &'static str {
    match &action.bucket_action {
        Some(Action::QuotaAssignmentAction(q)) => match q
            .rate_limit_strategy
            .as_ref()
            .and_then(|s| s.strategy.as_ref())
        {
            Some(Strategy::BlanketRule(_)) => "deny_all",
            _ => "share",
        },
        _ => "abandon",
    }
}

/// Assignments as the actions to send, by stream, in order (see [`Messages`]).
fn by_stream(sent: Vec<Assignment>) -> Messages {
    let mut by_stream: Messages = Vec::new();
    let mut at: HashMap<u64, usize> = HashMap::new();
    for a in sent {
        let i = *at.entry(a.stream).or_insert_with(|| {
            by_stream.push((a.stream, Vec::new()));
            by_stream.len() - 1
        });
        by_stream[i].1.push(assigned(&a));
    }
    by_stream
}

/// Actions to send, by stream, in the order the streams' first actions came: the board
/// lists reductions first, so a stream that shrinks hears it before one that grows.
type Messages = Vec<(u64, Vec<BucketAction>)>;

/// Refuses a message carrying more buckets than `[envoy] max_descriptors` or a bucket of
/// more entries than `[envoy] max_entries`, as `ShouldRateLimit` refuses its descriptors:
/// each bucket an Envoy names is state on the board until it lapses.
fn within_bounds(bounds: &CallBounds, reports: &RateLimitQuotaUsageReports) -> Result<(), Status> {
    let sent = reports.bucket_quota_usages.len();
    if sent > bounds.max_descriptors {
        return Err(Status::invalid_argument(format!(
            "{sent} buckets in one report, more than `[envoy] max_descriptors` ({})",
            bounds.max_descriptors
        )));
    }
    for (i, usage) in reports.bucket_quota_usages.iter().enumerate() {
        let entries = usage.bucket_id.as_ref().map_or(0, |b| b.bucket.len());
        if entries > bounds.max_entries {
            return Err(Status::invalid_argument(format!(
                "bucket {i}: {entries} entries, more than `[envoy] max_entries` ({})",
                bounds.max_entries
            )));
        }
    }
    Ok(())
}

/// An assignment as Envoy's token bucket: one token every `period / share` (rounded up,
/// so never faster than the share), at most the share's burst at once; deny all for none.
fn assigned(a: &Assignment) -> BucketAction {
    let strategy = if a.per_period == 0 {
        Strategy::BlanketRule(BlanketRule::DenyAll as i32)
    } else {
        let interval = a.period.as_nanos().div_ceil(u128::from(a.per_period));
        let interval = u64::try_from(interval).unwrap_or(u64::MAX);
        Strategy::TokenBucket(TokenBucket {
            max_tokens: u32::try_from(a.burst).unwrap_or(u32::MAX),
            tokens_per_fill: Some(UInt32Value { value: 1 }),
            fill_interval: Some(proto_duration(std::time::Duration::from_nanos(interval))),
        })
    };
    BucketAction {
        bucket_id: Some(bucket_id(a.bucket.clone())),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(proto_duration(a.ttl)),
            rate_limit_strategy: Some(RateLimitStrategy {
                strategy: Some(strategy),
            }),
        })),
    }
}

fn bucket_id(entries: Vec<(String, String)>) -> BucketId {
    BucketId {
        bucket: entries.into_iter().collect(),
    }
}

fn proto_duration(d: std::time::Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(stream: u64, bucket: &str, per_period: u64) -> Assignment {
        Assignment {
            stream,
            bucket: vec![("name".to_owned(), bucket.to_owned())],
            per_period,
            period: std::time::Duration::from_secs(1),
            burst: 1,
            ttl: std::time::Duration::from_secs(3),
        }
    }

    /// The board lists reductions first; the messages keep that order across streams, so
    /// a stream that shrinks is sent its message before one that grows.
    #[test]
    fn messages_go_out_in_the_boards_order_one_per_stream() {
        let sent = by_stream(vec![
            assignment(9, "a", 100),
            assignment(2, "a", 0),
            assignment(5, "a", 300),
            assignment(9, "b", 200),
        ]);
        let order: Vec<(u64, usize)> = sent.iter().map(|(s, a)| (*s, a.len())).collect();
        assert_eq!(order, [(9, 2), (2, 1), (5, 1)]);
        assert_eq!(action_name(&sent[1].1[0]), "deny_all");
        assert_eq!(action_name(&sent[0].1[0]), "share");
    }
}
