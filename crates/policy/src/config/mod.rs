//! The config file: parsed raw, then validated into rules, with errors that say where.
//!
//! ```toml
//! [server]
//! trusted_proxies = ["10.0.0.0/8"]
//! client_ip_header = "X-Forwarded-For"
//!
//! [[limit]]
//! name = "per-key"
//! key = ["header:x-api-key"]
//! algorithm = "gcra"
//! rate = "50/s"
//! burst = 100
//! ```
//!
//! A file is read in two steps, as ripgrep reads its arguments: serde reads the TOML into a
//! raw model where every field is optional and spanned (`raw.rs`), then validation turns it
//! into the typed [`Config`] (`validate.rs` driving; `rule.rs`, `limit.rs`, `key.rs` and
//! `bucket.rs` for a `[[limit]]`; `server.rs` (with `bounds.rs`, and `admin.rs` for the admin listener's token and names)
//! and `store.rs` for the sections), collecting every error with its
//! file, line, column and rule rather than stopping at the first.

mod adaptive;
mod admin;
mod bounds;
mod bucket;
mod calls;
mod error;
mod key;
mod limit;
mod model;
mod queue;
mod raw;
mod regions;
mod rule;
mod server;
mod settings;
mod store;
mod tls;
mod validate;

pub use adaptive::{Adaptive, ADAPTIVE_CONCURRENCY};
pub use admin::{AdminAccess, AdminToken, ADMIN_TOKEN_ENV, MIN_ADMIN_TOKEN};
pub use bounds::{Bounds, MIN_HEADER_BYTES};
pub(crate) use bucket::split_rate;
pub use calls::CallBounds;
pub use error::{ConfigError, ConfigErrors};
pub use model::{
    BodyTerm, BucketMatch, Cost, KeyPart, Match, Mode, OnStoreFailure, Rule, SettleFrom,
    WhenKeyMissing,
};
pub use queue::{Queue, MAX_WEIGHT};
pub use rule::SETTLE_FROM_WITHIN;
pub use settings::{
    Config, KeySources, MethodOverride, Regions, ServerSettings, StoreKind, StoreSettings,
    GLOBAL_HORIZON, HOME_IN_FLIGHT, MIN_STORE_BYTES,
};
pub use tls::{CertificateFiles, NamedFile, Tls, TlsListeners};
pub use validate::{load, parse};
