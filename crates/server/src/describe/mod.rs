//! Rules and settings described for people: the rows `check-config` prints and the admin
//! dashboard shows (`rule`), and an explanation rendered as text or JSON (`explanation`),
//! which `ratewarden explain` prints and the admin listener's `POST /v1/explain` answers.
//! Below both the commands and `serve`, so that neither imports the other to say the same.

pub(crate) mod explanation;
mod rule;

use ratewarden_policy::ServerSettings;

pub(crate) use rule::row;
pub use rule::{describe, describe_queue};

/// Where the admin listener is and how it is protected: where its token came from (never
/// the token), or why it has none. `check-config` and the start log line say the same.
pub(crate) fn admin_protection(settings: &ServerSettings) -> String {
    let access = &settings.admin_access;
    let Some(admin) = settings.admin else {
        return "off".to_owned();
    };
    match &access.token {
        Some(token) => format!("{admin}, bearer token from {}", token.source()),
        None if access.insecure => format!("{admin}, no token (admin_insecure)"),
        None => format!("{admin}, no token (loopback only)"),
    }
}
