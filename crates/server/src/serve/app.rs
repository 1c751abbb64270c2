//! What every listener shares: the engine, the clock, the settings, metrics and shedding.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use super::store::AnyStore;
use ratewarden_core::Clock;
use ratewarden_policy::envoy::EnvoyConfig;
use ratewarden_policy::{
    Answer, ConfigError, ConfigErrors, Engine, Jitter, ServerSettings, StoreSettings, Verdict,
};
use tokio::sync::watch;

use super::metrics::Metrics;
use super::shed::Shedder;
use super::throttle::Throttle;
use crate::serve::operator::{Operator, ReloadRecord, Sample, SAMPLE_EVERY};

/// How often a refused, untrusted proxy is logged at most: every request would flood the log.
const UNTRUSTED_LOG_EVERY_NS: u64 = 10 * ratewarden_core::NANOS_PER_SEC;

pub(crate) struct App {
    pub(crate) engine: Arc<Engine<AnyStore>>,
    pub(crate) clock: Arc<dyn Clock>,
    /// `[server]` as it is now: the fields read per request follow reloads.
    settings: RwLock<Arc<ServerSettings>>,
    /// `[server]` and `[store]` as started: what a reload cannot change, to name it.
    started: (ServerSettings, StoreSettings),
    pub(crate) metrics: Metrics,
    pub(crate) shedder: Arc<Shedder>,
    /// The dashboard's samples and the last reload's result.
    pub(crate) operator: Operator,
    config_path: Option<PathBuf>,
    /// Where the envoyproxy/ratelimit configs (in the engine) came from.
    envoy_path: Option<PathBuf>,
    ready: AtomicBool,
    jitter: Jitter,
    /// Refusals of a peer outside `trusted_proxies` on a proxy's door: the proxy may turn
    /// our 403 into an answer of its own (nginx's `error_page 403`), so the log is where
    /// its operator learns why.
    pub(crate) untrusted: Throttle,
    /// Each listener's TLS, when it has it: its certificates are read again on reload.
    pub(crate) tls: crate::serve::conn::tls::Listeners,
}

/// A reload put in force.
pub(crate) struct Reloaded {
    /// The version of the rules now in force.
    pub(crate) version: u64,
    /// The `[server]` and `[store]` fields the file changes that only a restart puts in
    /// force, as `[section] field`.
    pub(crate) needing_restart: Vec<&'static str>,
}

impl App {
    pub(crate) fn new(
        engine: Arc<Engine<AnyStore>>,
        settings: ServerSettings,
        store: StoreSettings,
        config_path: Option<PathBuf>,
        clock: Arc<dyn Clock>,
        envoy_path: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        let main = if settings.upstream.is_some() {
            "gateway"
        } else {
            "api"
        };
        let mut listeners = vec![main];
        if settings.api.is_some() {
            listeners.push("api");
        }
        if settings.admin.is_some() {
            listeners.push("admin");
        }
        let metrics = Metrics::new(Arc::clone(&engine), Arc::clone(&clock), &listeners);
        let tls = crate::serve::conn::tls::Listeners::new(&settings.tls)?;
        Ok(Self {
            tls,
            engine,
            clock,
            shedder: Arc::new(Shedder::new(
                settings.max_in_flight,
                settings.critical_reserve,
                settings.queue_timeout,
            )),
            started: (settings.clone(), store),
            settings: RwLock::new(Arc::new(settings)),
            metrics,
            operator: Operator::default(),
            config_path,
            envoy_path,
            ready: AtomicBool::new(false),
            jitter: Jitter::new(),
            untrusted: Throttle::new(UNTRUSTED_LOG_EVERY_NS),
        })
    }

    /// `[server]` as started: for what is set up once (listeners, connections, the
    /// upstream's pool), which a reload does not change.
    pub(crate) fn started(&self) -> &ServerSettings {
        &self.started.0
    }

    /// `[store]` as started: a reload does not move the store.
    pub(crate) fn started_store(&self) -> &StoreSettings {
        &self.started.1
    }

    /// `[server]` as it is now (read it once per request: a reload swaps it whole).
    pub(crate) fn settings(&self) -> Arc<ServerSettings> {
        Arc::clone(&self.settings.read().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Logs (at most once per period) that `who` asked on `door` and was refused for not
    /// being in `trusted_proxies`.
    pub(crate) fn log_untrusted(&self, who: &str, door: &str, setting: &str) {
        if let Some(suppressed) = self.untrusted.admit(self.clock.now()) {
            tracing::warn!(
                peer = who,
                door,
                suppressed,
                "refused a proxy not in {setting}: every request it asks about is refused \
                 (403 or PERMISSION_DENIED, which the proxy may show as an answer of its own, \
                 such as nginx's `error_page 403` turning it into a 429); add its address"
            );
        }
    }

    /// Reads the config file and the Envoy configs again, off the async workers (a large
    /// file must not stall decisions), then puts both in force in one swap; on any error
    /// neither changes. The `[server]` fields read per request change with it; those read
    /// at start (and all of `[store]`) are named in the answer and the log, not applied.
    pub(crate) async fn reload(&self) -> Result<Reloaded, ConfigErrors> {
        let result = self.reload_files().await;
        self.operator.reloaded(ReloadRecord {
            at_ns: self.clock.now(),
            version: self.engine.version(),
            errors: match &result {
                Ok(_) => Vec::new(),
                Err(errors) => errors.0.iter().map(ToString::to_string).collect(),
            },
            needing_restart: match &result {
                Ok(reloaded) => reloaded.needing_restart.clone(),
                Err(_) => Vec::new(),
            },
        });
        result
    }

    /// What a reload reads, as its log lines name it: Envoy configs only when some were
    /// loaded, or a reload mentioning them would send the operator looking for a file.
    fn what(&self) -> &'static str {
        match (&self.config_path, &self.envoy_path) {
            (_, None) => "rules",
            (None, Some(_)) => "Envoy configs",
            (Some(_), Some(_)) => "rules and Envoy configs",
        }
    }

    async fn reload_files(&self) -> Result<Reloaded, ConfigErrors> {
        let (config_path, envoy_path) = (self.config_path.clone(), self.envoy_path.clone());
        let loaded = tokio::task::spawn_blocking(move || load(config_path, envoy_path)).await;
        let loaded = loaded.unwrap_or_else(|error| {
            Err(ConfigErrors(vec![ConfigError {
                file: "(reload)".to_owned(),
                position: None,
                rule: None,
                message: format!("the reload task failed: {error}"),
            }]))
        });
        let (config, envoy) = match loaded {
            Ok(both) => both,
            Err(errors) => {
                tracing::warn!(%errors, "reload rejected; the old {} stay", self.what());
                self.metrics.reloaded(false);
                return Err(errors);
            }
        };
        let envoy = envoy.unwrap_or_else(|| (*self.engine.envoy()).clone());
        let mut needing_restart = Vec::new();
        let version = match config {
            Some(config) if config.server.admin_access.leaves_open(self.started.0.admin) => {
                // The listener stays where it started until a restart: a file that moved
                // `admin` to loopback and dropped its token must not open it meanwhile.
                let errors = ConfigErrors(vec![ConfigError {
                    file: self
                        .config_path
                        .as_ref()
                        .map_or_else(|| "(reload)".to_owned(), |p| p.display().to_string()),
                    position: None,
                    rule: None,
                    message: format!(
                        "the admin listener is still on {} until a restart, off loopback: \
                         the file must keep `[server] admin_token_file` (or the {} \
                         environment variable) or `admin_insecure = true`",
                        self.started
                            .0
                            .admin
                            .map(|a| a.to_string())
                            .unwrap_or_default(),
                        ratewarden_policy::ADMIN_TOKEN_ENV,
                    ),
                }]);
                tracing::warn!(%errors, "reload rejected; the old {} stay", self.what());
                self.metrics.reloaded(false);
                return Err(errors);
            }
            Some(config) => {
                // Every certificate read before anything changes: one that cannot be used
                // rejects the reload, and the old ones stay with the old rules.
                let tls = match self.tls.prepare(&config.server.tls) {
                    Ok(tls) => tls,
                    Err(errors) => {
                        tracing::warn!(%errors, "reload rejected; the old {} stay", self.what());
                        self.metrics.reloaded(false);
                        return Err(errors);
                    }
                };
                if config.regions.is_some() && !self.engine.has_home() {
                    // The home store is built at start: global rules would be counted in
                    // this region's store alone until then, each region its own limit.
                    let errors = ConfigErrors(vec![ConfigError {
                        file: self
                            .config_path
                            .as_ref()
                            .map_or_else(|| "(reload)".to_owned(), |p| p.display().to_string()),
                        position: None,
                        rule: None,
                        message: "`[regions]` was added, and the home store is connected at \
                                  start only: restart to count `scope = \"global\"` rules \
                                  across regions"
                            .to_owned(),
                    }]);
                    tracing::warn!(%errors, "reload rejected; the old {} stay", self.what());
                    self.metrics.reloaded(false);
                    return Err(errors);
                }
                crate::serve::conn::tls::Listeners::put(tls);
                // Against the settings started with, not the last reload's: a field that
                // still differs still is not in force.
                needing_restart = self.started.0.needing_restart(&config.server);
                needing_restart.extend(self.started.1.needing_restart(&config.store));
                if self.engine.config().regions != config.regions {
                    needing_restart.push("[regions]");
                }
                if !needing_restart.is_empty() {
                    tracing::warn!(
                        fields = needing_restart.join(", "),
                        "these fields changed but are read at start only: restart to apply them"
                    );
                }
                let server = Arc::new(config.server.clone());
                let version = self.engine.reload_with_envoy(config, envoy);
                *self
                    .settings
                    .write()
                    .unwrap_or_else(PoisonError::into_inner) = server;
                version
            }
            // Envoy configs only: the rules stay as they are.
            None => self.engine.reload_with_envoy(self.engine.config(), envoy),
        };
        tracing::info!(version, "{} reloaded", self.what());
        self.metrics.reloaded(true);
        Ok(Reloaded {
            version,
            needing_restart,
        })
    }

    /// What to do with a verdict: the contract's 429 or 503 (its `Retry-After` spread by
    /// `[server] retry_after_jitter`), or go on with the RateLimit fields (and a queueing
    /// rule's delay). `settings` are the ones the request already holds.
    pub(crate) fn answer_with(&self, verdict: &Verdict, settings: &ServerSettings) -> Answer {
        // Only a refusal says when to retry: a request let through draws no jitter (a SipHash
        // on every allowed decision otherwise).
        let refused = !verdict.allowed || verdict.unavailable || verdict.shed();
        let retry = if refused {
            self.jitter
                .apply(verdict.retry_ns(), settings.retry_after_jitter)
        } else {
            verdict.retry_ns()
        };
        if verdict.shed() && !verdict.unavailable {
            // An adaptive concurrency rule: the upstream is at what it can take.
            self.metrics.shed("adaptive");
        }
        if refused {
            log_refusal(verdict, retry);
        }
        verdict.answer(settings.legacy_headers, retry)
    }

    /// `retry_ns` plus up to `[server] retry_after_jitter` at random, so clients throttled
    /// together do not all come back together. Only ever later, never earlier.
    pub(crate) fn jittered(&self, retry_ns: u64) -> u64 {
        self.jitter
            .apply(retry_ns, self.settings().retry_after_jitter)
    }
}

/// The refusal log, off by default (a flood would otherwise flood the log too): on with
/// `RUST_LOG=info,ratewarden::refusals=debug`. One line per refused request: the rules
/// that refused it, the key each counted (an API key as its digest) and when to retry.
pub(crate) fn log_refusal(verdict: &Verdict, retry_ns: u64) {
    if !tracing::enabled!(target: REFUSALS, tracing::Level::DEBUG) {
        return;
    }
    let mut rules = String::new();
    for outcome in verdict.violated() {
        if !rules.is_empty() {
            rules.push_str(", ");
        }
        let name = verdict
            .rules
            .get(outcome.rule)
            .map_or("?", |r| r.name.as_str());
        rules.push_str(&format!("{name} ({})", outcome.key));
    }
    tracing::debug!(
        target: REFUSALS,
        status = if verdict.unavailable || verdict.shed() { 503 } else { 429 },
        rules = %rules,
        retry_after = %ratewarden_core::ReadableDuration(Duration::from_nanos(retry_ns)),
        "request refused"
    );
}

/// The refusal log's target, as `RUST_LOG` names it.
const REFUSALS: &str = "ratewarden::refusals";

/// Reads and validates both files (either may be absent); blocking file I/O.
fn load(
    config_path: Option<PathBuf>,
    envoy_path: Option<PathBuf>,
) -> Result<(Option<ratewarden_policy::Config>, Option<EnvoyConfig>), ConfigErrors> {
    if config_path.is_none() && envoy_path.is_none() {
        return Err(ConfigErrors(vec![ConfigError {
            file: "(none)".to_owned(),
            position: None,
            rule: None,
            message: "the server was started without a config file to reload".to_owned(),
        }]));
    }
    let envoy = envoy_path
        .as_deref()
        .map(ratewarden_policy::envoy::load)
        .transpose();
    let config = config_path
        .as_deref()
        .map(ratewarden_policy::config::load)
        .transpose();
    match (config, envoy) {
        (Ok(config), Ok(envoy)) => Ok((config, envoy)),
        // Every problem of both files at once.
        (Err(mut a), Err(b)) => {
            a.0.extend(b.0);
            Err(a)
        }
        (Err(errors), _) | (_, Err(errors)) => Err(errors),
    }
}

/// Drops idle keys from the store once a second, a bounded batch at a time, so memory
/// follows the live keys even when no new keys arrive to trigger the store's own sweep.
pub(crate) async fn sweep(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                app.engine.store().sweep(app.clock.now());
            }
            _ = stop.changed() => return,
        }
    }
}

/// Samples every rule's counters every [`SAMPLE_EVERY`] until `stop`.
pub(crate) async fn sample(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let mut rules = app.engine.stats();
                rules.extend(app.engine.envoy_stats());
                app.operator.sampled(Sample { at_ns: app.clock.now(), rules });
            }
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratewarden_core::ManualClock;

    #[tokio::test]
    async fn a_reload_cannot_open_a_listener_still_bound_off_loopback() {
        let dir = std::env::temp_dir().join(format!("ratewarden-app-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, "0123456789abcdef-started").unwrap();
        let path = dir.join("rules.toml");
        // Started off loopback with a token (nothing is bound here: no listener is started).
        let with_token = format!(
            "[server]\nadmin = \"192.0.2.1:9090\"\nadmin_token_file = {:?}\n",
            token.display().to_string()
        );
        std::fs::write(&path, &with_token).unwrap();
        let config = ratewarden_policy::config::load(&path).unwrap();
        let store = AnyStore::from_settings(&config.store).unwrap();
        let (server, store_settings) = (config.server.clone(), config.store.clone());
        let engine = Arc::new(Engine::with_envoy(config, EnvoyConfig::default(), store));
        let clock = Arc::new(ManualClock::new(0));
        let app = App::new(
            engine,
            server,
            store_settings,
            Some(path.clone()),
            clock,
            None,
        )
        .unwrap();

        // The file moves `admin` to loopback (a restart's business) and drops the token.
        std::fs::write(&path, "[server]\nadmin = \"127.0.0.1:9090\"\n").unwrap();
        let errors = app.reload().await.err().expect("the reload is refused");
        assert!(errors.to_string().contains("192.0.2.1:9090"), "{errors}");
        assert!(
            app.settings().admin_access.token.is_some(),
            "the token stays"
        );
        // With the token kept, the same move goes through (and names `admin` for a restart).
        std::fs::write(&path, with_token.replace("192.0.2.1", "127.0.0.1")).unwrap();
        let reloaded = app.reload().await.expect("the reload goes through");
        assert!(reloaded.needing_restart.contains(&"[server] admin"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
