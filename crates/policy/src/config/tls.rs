//! `[tls.listen]`, `[tls.api]`, `[tls.admin]` and `[tls.grpc]`: TLS on the listener of that
//! `[server]` field, from PEM files.
//!
//! The files are read where the listener is served (the server's TLS module), at start and
//! on every reload, so a renewed certificate is taken up by a reload. What is checked here
//! is the section's shape; each file keeps where the config names it, so that a certificate
//! the server cannot use is reported at its line like any other config error.

use std::path::PathBuf;

use toml::Spanned;

use super::error::{ConfigError, Errors};
use super::raw::{RawTls, RawTlsListeners};

/// TLS on each listener that has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsListeners {
    /// The main listener (`[server] listen`): the gateway, or the decision API.
    pub listen: Option<Tls>,
    /// `[server] api`.
    pub api: Option<Tls>,
    /// `[server] admin`.
    pub admin: Option<Tls>,
    /// `[server] grpc`.
    pub grpc: Option<Tls>,
}

impl TlsListeners {
    /// The sections whose presence differs in `next`, as `[tls.name]`: whether a listener
    /// speaks TLS at all is set when it is bound; its certificates are read again on reload.
    pub fn needing_restart(&self, next: &TlsListeners) -> Vec<&'static str> {
        [
            (
                "[tls.listen]",
                self.listen.is_some() != next.listen.is_some(),
            ),
            ("[tls.api]", self.api.is_some() != next.api.is_some()),
            ("[tls.admin]", self.admin.is_some() != next.admin.is_some()),
            ("[tls.grpc]", self.grpc.is_some() != next.grpc.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, differs)| differs.then_some(field))
        .collect()
    }
}

/// One listener's TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// The certificates it may present, at least one. A client's SNI name chooses the first
    /// certificate valid for it; a client naming none of them (or no name) gets the first.
    pub certificates: Vec<CertificateFiles>,
    /// The CA bundle its clients' certificates must chain to: with it, a client without a
    /// valid certificate is refused in the handshake (mutual TLS).
    pub client_ca: Option<NamedFile>,
}

/// One certificate: its chain (leaf first) and its private key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    /// The certificate chain.
    pub cert: NamedFile,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: NamedFile,
}

/// A file a config names, and where it names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedFile {
    /// The file, as written (relative to the working directory).
    pub path: PathBuf,
    /// The field naming it, as errors show it: ``"`[tls.listen]`: `cert`"``.
    pub field: String,
    /// The config file naming it.
    pub config: String,
    /// 1-based line and column of the value, in `config`.
    pub position: Option<(usize, usize)>,
}

impl NamedFile {
    /// An error about this file, at the line naming it: `message` says what is wrong.
    pub fn error(&self, message: impl std::fmt::Display) -> ConfigError {
        ConfigError {
            file: self.config.clone(),
            position: self.position,
            rule: None,
            message: format!("{}: {}: {message}", self.field, self.path.display()),
        }
    }
}

/// `[tls.*]`, checked against the listeners `[server]` has: a section for a listener that
/// is off is an error, not TLS silently unused.
pub(super) fn tls_listeners(
    raw: RawTlsListeners,
    on: [bool; 4],
    errors: &mut Errors<'_>,
) -> TlsListeners {
    let [_, api_on, admin_on, grpc_on] = on;
    let mut one = |name: &str, raw: Option<Spanned<RawTls>>, listening: bool| {
        let raw = raw?;
        if !listening {
            errors.at(
                Some(raw.span()),
                None,
                format!(
                    "`[tls.{name}]`: `[server] {name}` is off, so there is no listener to \
                     serve TLS on; set `[server] {name}` or remove this section"
                ),
            );
            return None;
        }
        tls(name, raw.into_inner(), errors)
    };
    TlsListeners {
        listen: one("listen", raw.listen, true),
        api: one("api", raw.api, api_on),
        admin: one("admin", raw.admin, admin_on),
        grpc: one("grpc", raw.grpc, grpc_on),
    }
}

fn tls(name: &str, raw: RawTls, errors: &mut Errors<'_>) -> Option<Tls> {
    let section = format!("`[tls.{name}]`");
    let file = |field: &str, value: Spanned<String>, errors: &mut Errors<'_>| {
        let path = value.get_ref().trim();
        if path.is_empty() {
            errors.at(
                Some(value.span()),
                None,
                format!("{section}: `{field}` is empty; name a PEM file"),
            );
            return None;
        }
        Some(NamedFile {
            path: PathBuf::from(path),
            field: format!("{section}: `{field}`"),
            config: errors.file.to_owned(),
            position: Some(errors.position(value.span().start)),
        })
    };
    let pair = |cert: Option<Spanned<String>>,
                key: Option<Spanned<String>>,
                at: Option<std::ops::Range<usize>>,
                prefix: &str,
                errors: &mut Errors<'_>| {
        match (cert, key) {
            (Some(cert), Some(key)) => Some(CertificateFiles {
                cert: file(&format!("{prefix}cert"), cert, errors)?,
                key: file(&format!("{prefix}key"), key, errors)?,
            }),
            (Some(cert), None) => {
                errors.at(
                    Some(cert.span()),
                    None,
                    format!("{section}: `{prefix}cert` needs its private key, `{prefix}key`"),
                );
                None
            }
            (None, Some(key)) => {
                errors.at(
                    Some(key.span()),
                    None,
                    format!("{section}: `{prefix}key` needs its certificate, `{prefix}cert`"),
                );
                None
            }
            (None, None) => {
                errors.at(
                    at,
                    None,
                    format!("{section}: a certificate needs `cert` and `key` (PEM files)"),
                );
                None
            }
        }
    };
    let mut certificates = Vec::new();
    let mut broken = false;
    if raw.certificates.is_empty() {
        match pair(raw.cert, raw.key, None, "", errors) {
            Some(one) => certificates.push(one),
            None => broken = true,
        }
    } else {
        if let Some(single) = raw.cert.or(raw.key) {
            errors.at(
                Some(single.span()),
                None,
                format!(
                    "{section}: give one certificate as `cert` and `key`, or several as \
                     `certificates`, not both"
                ),
            );
            broken = true;
        }
        for (i, entry) in raw.certificates.into_iter().enumerate() {
            let span = entry.span();
            let entry = entry.into_inner();
            match pair(
                entry.cert,
                entry.key,
                Some(span),
                &format!("certificates[{i}]."),
                errors,
            ) {
                Some(one) => certificates.push(one),
                None => broken = true,
            }
        }
    }
    let client_ca = match raw.client_ca {
        Some(ca) => match file("client_ca", ca, errors) {
            Some(ca) => Some(ca),
            None => {
                broken = true;
                None
            }
        },
        None => None,
    };
    (!broken).then_some(Tls {
        certificates,
        client_ca,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    #[test]
    fn one_certificate_and_several_are_read_with_where_they_are_named() {
        let config = parse(
            "r.toml",
            "[server]\nadmin = \"127.0.0.1:9090\"\n\n[tls.listen]\ncert = \"a.pem\"\nkey = \"a.key\"\n\n\
             [tls.admin]\ncertificates = [{ cert = \"b.pem\", key = \"b.key\" }, { cert = \"c.pem\", key = \"c.key\" }]\n\
             client_ca = \"ca.pem\"\n",
        )
        .expect("valid");
        let listen = config.server.tls.listen.expect("listen");
        assert_eq!(listen.certificates.len(), 1);
        assert_eq!(listen.certificates[0].cert.path.to_str(), Some("a.pem"));
        assert_eq!(listen.certificates[0].cert.position, Some((5, 8)));
        let admin = config.server.tls.admin.expect("admin");
        assert_eq!(admin.certificates.len(), 2);
        assert_eq!(admin.certificates[1].key.path.to_str(), Some("c.key"));
        let ca = admin.client_ca.expect("client_ca");
        assert_eq!(ca.position, Some((10, 13)));
        let error = ca.error("no certificate in it").to_string();
        assert!(
            error.starts_with("r.toml:10:13: `[tls.admin]`: `client_ca`: ca.pem"),
            "{error}"
        );
        assert!(config.server.tls.api.is_none());
    }

    #[test]
    fn a_section_for_a_listener_that_is_off_or_half_a_pair_is_refused_where_it_is() {
        let errors = parse(
            "r.toml",
            "[tls.api]\ncert = \"a.pem\"\nkey = \"a.key\"\n\n[tls.listen]\ncert = \"a.pem\"\n",
        )
        .expect_err("invalid")
        .to_string();
        assert!(
            errors.contains("r.toml:1:1: `[tls.api]`: `[server] api` is off"),
            "{errors}"
        );
        assert!(
            errors.contains("r.toml:6:8: `[tls.listen]`: `cert` needs its private key, `key`"),
            "{errors}"
        );
        let errors = parse(
            "r.toml",
            "[tls.listen]\ncert = \"a.pem\"\nkey = \"a.key\"\ncertificates = [{ cert = \"b.pem\" }]\n",
        )
        .expect_err("invalid")
        .to_string();
        assert!(errors.contains("not both"), "{errors}");
        assert!(
            errors.contains("`certificates[0].cert` needs its private key"),
            "{errors}"
        );
        let errors = parse("r.toml", "[tls.listen]\n")
            .expect_err("invalid")
            .to_string();
        assert!(
            errors.contains("a certificate needs `cert` and `key`"),
            "{errors}"
        );
    }

    #[test]
    fn turning_tls_on_or_off_takes_a_restart_and_new_files_do_not() {
        let on = parse(
            "r.toml",
            "[tls.listen]\ncert = \"a.pem\"\nkey = \"a.key\"\n",
        )
        .unwrap();
        let moved = parse(
            "r.toml",
            "[tls.listen]\ncert = \"b.pem\"\nkey = \"b.key\"\n",
        )
        .unwrap();
        let off = parse("r.toml", "").unwrap();
        assert!(on.server.needing_restart(&moved.server).is_empty());
        assert_eq!(on.server.needing_restart(&off.server), vec!["[tls.listen]"]);
    }
}
