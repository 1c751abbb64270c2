//! What a client (or the upstream) may hold of the gateway: header bytes, connections, and
//! the time a head or a body may take, as `[server]` fields.
//!
//! Some are read where a connection or the upstream's pool is set up, once at start; the
//! others are read per request, so a reload changes them for the next request.
//! [`Bounds::needing_restart`] names the first kind when a reload changes them.

use std::time::Duration;

/// The gateway's and the decision API's bounds on slow or greedy peers (`[server]` fields
/// of these names).
///
/// The defaults are what an honest client never meets: a head in one packet, a body at
/// more than a kilobyte a second, an upstream that answers within half a minute.
///
/// # Examples
///
/// ```
/// let config = ratewarden_policy::config::parse(
///     "r.toml",
///     "[server]\nmax_header_bytes = 16_384\nupstream_response_timeout = \"5s\"\n",
/// )
/// .unwrap();
/// assert_eq!(config.server.bounds.max_header_bytes, 16_384);
/// assert_eq!(config.server.bounds.upstream_response_timeout.as_secs(), 5);
/// assert_eq!(config.server.bounds.header_read_timeout.as_secs(), 10, "the default");
/// assert_eq!(config.server.bounds.idle_timeout.as_secs(), 75, "the default");
/// assert_eq!(config.server.bounds.send_timeout.as_secs(), 60, "the default");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// How long a client may take to send a request's head, from its first byte:
    /// slowloris holds connections by sending headers a byte at a time. Read at start.
    pub header_read_timeout: Duration,
    /// How long a kept-alive connection may wait, idle, for the next request's first byte.
    /// Separate from `header_read_timeout` so that a client honouring a `Retry-After` of
    /// 10 s on a pooled connection does not race the server closing it. Read at start.
    pub idle_timeout: Duration,
    /// The longest a client may leave an answer unread: while a write to it makes no
    /// progress for this long, the connection is dropped, with what it held (the place in
    /// flight, a concurrency permit, the upstream's connection). Timed between writes that
    /// move bytes, as nginx's `send_timeout`, so a slow reader that keeps reading is never
    /// cut; one that stops reading no longer holds its places for ever. Read at start.
    pub send_timeout: Duration,
    /// The most a request's head may take, in bytes (at least 8 KiB, the HTTP parser's
    /// floor); larger heads are answered 431. Read at start.
    pub max_header_bytes: usize,
    /// How long the decision API waits for a whole (bounded, `max_body`) body; 408 after.
    pub api_body_timeout: Duration,
    /// The longest a gateway request body may go without a byte; 408 after.
    pub body_idle_timeout: Duration,
    /// The slowest a gateway request body may arrive, in bytes a second on average over
    /// the time spent waiting for it, once `body_rate_grace` has passed; 0 for no minimum.
    /// A byte every few seconds never stalls for `body_idle_timeout`, and is still an attack.
    pub body_min_rate: u64,
    /// How long a body may be slower than `body_min_rate` (a slow start, a small body sent
    /// late).
    pub body_rate_grace: Duration,
    /// How long connecting to the upstream may take; 504 after. Read at start (the
    /// upstream's connector is built once per worker).
    pub upstream_connect_timeout: Duration,
    /// How long the upstream may take to send its response head once the request body has
    /// been sent whole (an upload's own time is bounded by the body fields), or keep the
    /// body it was sent untaken; 504 after.
    pub upstream_response_timeout: Duration,
    /// The longest the upstream's response body may go without a byte; the response is
    /// cut after.
    pub upstream_idle_timeout: Duration,
    /// How long an unused pooled connection to the upstream is kept. Read at start.
    pub upstream_pool_idle: Duration,
    /// The most connections one client (an IPv4 address, an IPv6 /64; never a trusted
    /// proxy) may hold open on one listener of one worker; more are closed at once. Read at
    /// start.
    pub max_connections_per_client: usize,
    /// The most streams one HTTP/2 client may have open at once on a connection (the
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` we announce); a stream past it is refused with
    /// `REFUSED_STREAM`. Read at start.
    pub http2_max_streams: u32,
    /// How long an upgraded connection through the gateway (a WebSocket) may go without a
    /// byte either way before it is closed.
    pub upgraded_idle_timeout: Duration,
    /// The longest an upgraded connection through the gateway stays open, however busy.
    pub upgraded_max_duration: Duration,
}

/// The smallest `max_header_bytes` hyper's HTTP/1 parser takes (its read buffer's floor).
pub const MIN_HEADER_BYTES: usize = 8 * 1024;

impl Default for Bounds {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            // nginx's `keepalive_timeout`; above the 60 s idle timeout of the load balancers
            // usually in front (AWS ALB, GCP's), so that they, not we, close an idle
            // connection and never send on one we are closing.
            idle_timeout: Duration::from_secs(75),
            // nginx's `send_timeout`.
            send_timeout: Duration::from_secs(60),
            // A head's bytes are held until it is parsed: unbounded, clients sending 200 KB
            // heads on many connections hold gigabytes.
            max_header_bytes: 64 * 1024,
            api_body_timeout: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(10),
            body_min_rate: 1024,
            body_rate_grace: Duration::from_secs(10),
            upstream_connect_timeout: Duration::from_secs(5),
            // nginx's `proxy_read_timeout` is 60 s; an API behind a rate limiter that takes
            // longer than 30 s is holding places others need.
            upstream_response_timeout: Duration::from_secs(30),
            upstream_idle_timeout: Duration::from_secs(30),
            upstream_pool_idle: Duration::from_secs(60),
            max_connections_per_client: 256,
            // nginx's `http2_max_concurrent_streams` is 128, hyper's 200: a hundred is what
            // browsers and gRPC clients are used to (RFC 9113 asks for no fewer).
            http2_max_streams: 100,
            // Above the 30-60 s ping interval of WebSocket libraries and load balancers, so
            // that only a connection nobody uses is closed.
            upgraded_idle_timeout: Duration::from_secs(300),
            upgraded_max_duration: Duration::from_secs(24 * 3600),
        }
    }
}

impl Bounds {
    /// The fields read once at start that differ in `next`, as `[server] field`: a reload
    /// cannot change them (they take a restart), and says so rather than ignore them.
    pub fn needing_restart(&self, next: &Bounds) -> Vec<&'static str> {
        [
            (
                "[server] header_read_timeout",
                self.header_read_timeout != next.header_read_timeout,
            ),
            (
                "[server] idle_timeout",
                self.idle_timeout != next.idle_timeout,
            ),
            (
                "[server] send_timeout",
                self.send_timeout != next.send_timeout,
            ),
            (
                "[server] max_header_bytes",
                self.max_header_bytes != next.max_header_bytes,
            ),
            (
                "[server] upstream_connect_timeout",
                self.upstream_connect_timeout != next.upstream_connect_timeout,
            ),
            (
                "[server] upstream_pool_idle",
                self.upstream_pool_idle != next.upstream_pool_idle,
            ),
            (
                "[server] max_connections_per_client",
                self.max_connections_per_client != next.max_connections_per_client,
            ),
            (
                "[server] http2_max_streams",
                self.http2_max_streams != next.http2_max_streams,
            ),
        ]
        .into_iter()
        .filter_map(|(field, differs)| differs.then_some(field))
        .collect()
    }
}
