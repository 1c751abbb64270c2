//! TLS on a listener (`[tls.listen]`, `[tls.api]`, `[tls.admin]`, `[tls.grpc]`), with
//! rustls: certificates from PEM files, chosen by the client's SNI name, ALPN offering
//! `h2` and `http/1.1` (`h2` alone on the gRPC listener), TLS 1.2 and 1.3 only, sessions
//! resumed by ticket, and optionally a client certificate required (mutual TLS).
//!
//! A reload builds the listener's rustls config again from the files, and puts it in force
//! only when every file of every listener reads: a certificate that does not is an error
//! at the config line naming it, and the old certificates stay. Connections already open
//! keep the config they were accepted with; the ticket key is kept across reloads, so a
//! client resumes its session after one.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use ratewarden_policy::config::{
    CertificateFiles, ConfigErrors, NamedFile, Tls as TlsFiles, TlsListeners,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// The protocols a listener offers in ALPN, in the order it prefers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// `h2`, then `http/1.1`: the HTTP listeners.
    Http,
    /// `h2` only: gRPC.
    Grpc,
}

impl Alpn {
    fn protocols(self) -> Vec<Vec<u8>> {
        match self {
            Alpn::Http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Alpn::Grpc => vec![b"h2".to_vec()],
        }
    }
}

/// One listener's TLS: the rustls config in force, and what is kept across reloads.
pub(crate) struct Tls {
    config: RwLock<Arc<ServerConfig>>,
    alpn: Alpn,
    /// The session ticket key (rotated by rustls every six hours), kept across reloads.
    ticketer: Arc<dyn ProducesTickets>,
    /// TLS 1.2 sessions resumed by id.
    sessions: Arc<dyn StoresServerSessions>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("alpn", &self.alpn).finish()
    }
}

/// The most TLS 1.2 sessions kept for resumption by id, per listener (rustls's default);
/// TLS 1.3 resumes by ticket, which keeps nothing on the server.
const SESSIONS: usize = 256;

impl Tls {
    /// A listener's TLS from its files.
    ///
    /// # Errors
    ///
    /// A file that cannot be read or used, at the config line naming it.
    pub(crate) fn new(files: &TlsFiles, alpn: Alpn) -> Result<Self, ConfigErrors> {
        let ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(|e| errors(&files.certificates[0].cert, format!("no ticket key: {e}")))?;
        let sessions: Arc<dyn StoresServerSessions> =
            rustls::server::ServerSessionMemoryCache::new(SESSIONS);
        let config = build(files, alpn, &ticketer, &sessions)?;
        Ok(Tls {
            config: RwLock::new(config),
            alpn,
            ticketer,
            sessions,
        })
    }

    /// The config `files` make now, to put in force with [`Tls::put`] once every listener's
    /// has been built.
    ///
    /// # Errors
    ///
    /// As [`Tls::new`]; the config in force is untouched.
    pub(crate) fn prepare(&self, files: &TlsFiles) -> Result<Arc<ServerConfig>, ConfigErrors> {
        build(files, self.alpn, &self.ticketer, &self.sessions)
    }

    /// Puts `config` in force for the connections accepted from now on.
    pub(crate) fn put(&self, config: Arc<ServerConfig>) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = config;
    }

    /// What accepts the next connection.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(
            &self.config.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

fn errors(file: &NamedFile, message: impl fmt::Display) -> ConfigErrors {
    ConfigErrors(vec![file.error(message)])
}

fn build(
    files: &TlsFiles,
    alpn: Alpn,
    ticketer: &Arc<dyn ProducesTickets>,
    sessions: &Arc<dyn StoresServerSessions>,
) -> Result<Arc<ServerConfig>, ConfigErrors> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut found = Vec::new();
    let mut keys = Vec::new();
    for files in &files.certificates {
        match certified(files, &provider) {
            Ok(key) => keys.push(key),
            Err(mut e) => found.append(&mut e.0),
        }
    }
    let verifier = match &files.client_ca {
        None => None,
        Some(ca) => match client_verifier(ca, &provider) {
            Ok(verifier) => Some(verifier),
            Err(mut e) => {
                found.append(&mut e.0);
                None
            }
        },
    };
    if !found.is_empty() {
        return Err(ConfigErrors(found));
    }
    let first = &files.certificates[0].cert;
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| errors(first, e))?;
    let builder = match verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(BySni { keys }));
    config.alpn_protocols = alpn.protocols();
    config.ticketer = Arc::clone(ticketer);
    config.session_storage = Arc::clone(sessions);
    Ok(Arc::new(config))
}

/// A certificate chain and its key, read and checked against each other.
fn certified(
    files: &CertificateFiles,
    provider: &CryptoProvider,
) -> Result<Certificate, ConfigErrors> {
    let text = read(&files.cert)?;
    let chain = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| errors(&files.cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(errors(
            &files.cert,
            "holds no certificate (a `-----BEGIN CERTIFICATE-----` block)",
        ));
    }
    // The leaf is read as a client would read it: one it could not read is refused here,
    // not in every handshake.
    if let Err(e) = webpki::EndEntityCert::try_from(&chain[0]) {
        return Err(errors(
            &files.cert,
            format!("its first certificate cannot be read: {e}"),
        ));
    }
    let key_text = read(&files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_text).map_err(|e| {
        errors(
            &files.key,
            format!("holds no private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
        )
    })?;
    let key = CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => errors(
            &files.key,
            format!("is not the key of `cert` ({})", files.cert.path.display()),
        ),
        other => errors(&files.key, format!("cannot be used: {other}")),
    })?;
    Ok(Certificate { key: Arc::new(key) })
}

fn read(file: &NamedFile) -> Result<Vec<u8>, ConfigErrors> {
    std::fs::read(&file.path).map_err(|e| errors(file, format!("cannot read: {e}")))
}

fn client_verifier(
    ca: &NamedFile,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, ConfigErrors> {
    let text = read(ca)?;
    let mut roots = rustls::RootCertStore::empty();
    let mut any = false;
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| errors(ca, format!("not a PEM certificate bundle: {e}")))?;
        roots.add(cert).map_err(|e| {
            errors(
                ca,
                format!("holds a CA certificate that cannot be used: {e}"),
            )
        })?;
        any = true;
    }
    if !any {
        return Err(errors(ca, "holds no CA certificate"));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(provider),
    )
    .build()
    .map_err(|e| errors(ca, e))
}

/// A certificate a listener may present.
#[derive(Debug)]
struct Certificate {
    key: Arc<CertifiedKey>,
}

impl Certificate {
    /// Whether this certificate is valid for `name` (its subject alternative names,
    /// wildcards as RFC 6125 has them), as webpki checks it for a client.
    fn serves(&self, name: &ServerName<'_>) -> bool {
        self.key
            .end_entity_cert()
            .ok()
            .and_then(|der| webpki::EndEntityCert::try_from(der).ok())
            .is_some_and(|cert| cert.verify_is_valid_for_subject_name(name).is_ok())
    }
}

/// Chooses a listener's certificate by the client's SNI name: the first valid for it, or
/// the first of all when none is (or the client sent no name: an IP address, an old client).
#[derive(Debug)]
struct BySni {
    keys: Vec<Certificate>,
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let first = self.keys.first()?;
        if self.keys.len() == 1 {
            return Some(Arc::clone(&first.key));
        }
        let chosen = hello
            .server_name()
            .and_then(|name| ServerName::try_from(name).ok())
            .and_then(|name| self.keys.iter().find(|k| k.serves(&name)));
        Some(Arc::clone(&chosen.unwrap_or(first).key))
    }
}

/// The TLS of each listener that started with it.
#[derive(Debug, Default)]
pub(crate) struct Listeners {
    pub(crate) listen: Option<Arc<Tls>>,
    pub(crate) api: Option<Arc<Tls>>,
    pub(crate) admin: Option<Arc<Tls>>,
    pub(crate) grpc: Option<Arc<Tls>>,
}

/// The configs a reload builds, put in force together ([`Listeners::put`]).
pub(crate) struct Prepared(Vec<(Arc<Tls>, Arc<ServerConfig>)>);

impl Listeners {
    /// Each listener's TLS from `files`.
    ///
    /// # Errors
    ///
    /// Every file that cannot be read or used, each at the config line naming it.
    pub(crate) fn new(files: &TlsListeners) -> Result<Self, ConfigErrors> {
        let mut found = Vec::new();
        let mut one = |files: &Option<TlsFiles>, alpn| match files {
            None => None,
            Some(files) => match Tls::new(files, alpn) {
                Ok(tls) => Some(Arc::new(tls)),
                Err(mut e) => {
                    found.append(&mut e.0);
                    None
                }
            },
        };
        let listeners = Listeners {
            listen: one(&files.listen, Alpn::Http),
            api: one(&files.api, Alpn::Http),
            admin: one(&files.admin, Alpn::Http),
            grpc: one(&files.grpc, Alpn::Grpc),
        };
        if found.is_empty() {
            Ok(listeners)
        } else {
            Err(ConfigErrors(found))
        }
    }

    /// The configs `files` make for the listeners serving TLS now (a listener started
    /// without it, or a section removed, takes a restart, which the reload names).
    ///
    /// # Errors
    ///
    /// Every file that cannot be read or used; nothing changes.
    pub(crate) fn prepare(&self, files: &TlsListeners) -> Result<Prepared, ConfigErrors> {
        let mut found = Vec::new();
        let mut prepared = Vec::new();
        for (tls, files) in [
            (&self.listen, &files.listen),
            (&self.api, &files.api),
            (&self.admin, &files.admin),
            (&self.grpc, &files.grpc),
        ] {
            if let (Some(tls), Some(files)) = (tls, files) {
                match tls.prepare(files) {
                    Ok(config) => prepared.push((Arc::clone(tls), config)),
                    Err(mut e) => found.append(&mut e.0),
                }
            }
        }
        if found.is_empty() {
            Ok(Prepared(prepared))
        } else {
            Err(ConfigErrors(found))
        }
    }

    /// Puts a reload's configs in force.
    pub(crate) fn put(prepared: Prepared) {
        for (tls, config) in prepared.0 {
            tls.put(config);
        }
    }
}

/// In a request's extensions when it came over TLS (set by the listener for every request
/// hyper serves of such a connection): with its client certificate's subject
/// ([`client_subject`]) when the client presented one.
#[derive(Debug, Clone)]
pub(crate) struct ViaTls {
    pub(crate) client_subject: Option<Arc<str>>,
}

/// The subject of a connection's client certificate (verified in the handshake against
/// `client_ca`), as RFC 4514 writes a name (`CN=dashboard,O=ops`): what the
/// `client_cert` key part reads. `None` without one.
pub(crate) fn client_subject(connection: &rustls::ServerConnection) -> Option<Arc<str>> {
    let leaf = connection.peer_certificates()?.first()?;
    let cert = webpki::EndEntityCert::try_from(leaf).ok()?;
    Some(Arc::from(rfc4514(cert.subject())?))
}

/// The attribute types RFC 4514 names (and `emailAddress`), by their OID's DER bytes;
/// another is written in dotted form.
const ATTRIBUTES: [(&[u8], &str); 10] = [
    (&[0x55, 0x04, 0x03], "CN"),
    (&[0x55, 0x04, 0x07], "L"),
    (&[0x55, 0x04, 0x08], "ST"),
    (&[0x55, 0x04, 0x0a], "O"),
    (&[0x55, 0x04, 0x0b], "OU"),
    (&[0x55, 0x04, 0x06], "C"),
    (&[0x55, 0x04, 0x09], "STREET"),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
        "DC",
    ),
    (
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
        "UID",
    ),
    (
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01],
        "emailAddress",
    ),
];

/// One DER element of `input`: its tag, its contents, and what follows it.
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// A DER `Name`'s contents (the RDN sequence, without its outer tag) as RFC 4514 writes it:
/// the last RDN first, attributes of one RDN joined by `+`.
fn rfc4514(mut rdns: &[u8]) -> Option<String> {
    let mut written = Vec::new();
    while !rdns.is_empty() {
        let (tag, mut set, rest) = der(rdns)?;
        rdns = rest;
        if tag != 0x31 {
            return None;
        }
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (tag, pair, rest) = der(set)?;
            set = rest;
            if tag != 0x30 {
                return None;
            }
            let (oid_tag, oid, element) = der(pair)?;
            let (value_tag, value, _) = der(element)?;
            if oid_tag != 0x06 {
                return None;
            }
            let name = ATTRIBUTES
                .iter()
                .find(|(der, _)| *der == oid)
                .map_or_else(|| dotted(oid), |(_, name)| (*name).to_owned());
            let text = match value_tag {
                // UTF8String, PrintableString, IA5String, TeletexString (as Latin-1 would
                // be wrong for T.61, but what certificates put there is ASCII).
                0x0c | 0x13 | 0x16 | 0x14 => String::from_utf8_lossy(value).into_owned(),
                // BMPString: UTF-16BE.
                0x1e => {
                    let units: Vec<u16> = value
                        .chunks_exact(2)
                        .map(|c| u16::from_be_bytes([c[0], c[1]]))
                        .collect();
                    String::from_utf16_lossy(&units)
                }
                _ => {
                    // Anything else is written as `#` and its DER in hex (RFC 4514 §2.4).
                    let mut hex = String::from("#");
                    for b in element {
                        hex.push_str(&format!("{b:02x}"));
                    }
                    parts.push(format!("{name}={hex}"));
                    continue;
                }
            };
            parts.push(format!("{name}={}", escape(&text)));
        }
        written.push(parts.join("+"));
    }
    written.reverse();
    Some(written.join(","))
}

/// An OID's DER contents in dotted form (`2.5.4.3`).
fn dotted(oid: &[u8]) -> String {
    let Some((&first, rest)) = oid.split_first() else {
        return String::new();
    };
    let mut out = format!("{}.{}", first / 40, first % 40);
    let mut value: u64 = 0;
    for &b in rest {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            out.push_str(&format!(".{value}"));
            value = 0;
        }
    }
    out
}

/// An attribute value escaped as RFC 4514 §2.4 asks.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        if c == '\0' {
            out.push_str("\\00");
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject_of(pem: &str) -> String {
        let path = format!("{}/../../fixtures/tls/{pem}", env!("CARGO_MANIFEST_DIR"));
        let der = CertificateDer::pem_file_iter(path)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let cert = webpki::EndEntityCert::try_from(&der).unwrap();
        rfc4514(cert.subject()).unwrap()
    }

    #[test]
    fn a_subject_is_written_as_rfc_4514_has_it_last_rdn_first() {
        assert_eq!(subject_of("client.pem"), "CN=dashboard,O=ops");
        assert_eq!(subject_of("stranger.pem"), "CN=stranger,O=elsewhere");
        assert_eq!(subject_of("gateway.pem"), "CN=gateway.test");
    }

    #[test]
    fn values_are_escaped_and_unknown_types_dotted() {
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape("#lead"), "\\#lead");
        assert_eq!(escape(" both "), "\\ both\\ ");
        // SET { SEQUENCE { OID 1.2.3, UTF8String "x" } }
        let rdn = [
            0x31, 0x0a, 0x30, 0x08, 0x06, 0x02, 0x2a, 0x03, 0x0c, 0x02, b'x', b'y',
        ];
        assert_eq!(rfc4514(&rdn).as_deref(), Some("1.2.3=xy"));
        // Truncated: no name rather than a wrong one.
        assert_eq!(rfc4514(&rdn[..6]), None);
    }
}
