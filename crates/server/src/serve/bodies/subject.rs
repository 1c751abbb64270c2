//! A client as a decision API body names it: the same fields, with the same defaults, in a
//! check, a settle and a release.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use http::StatusCode;

use crate::serve::reply::Problem;

/// A client's attributes as a body names them: the same fields, with the same defaults, in
/// a check, a settle and a release, so that a settle rebuilds the keys its check built.
pub(crate) struct Subject<'a> {
    pub(crate) ip: Option<&'a str>,
    pub(crate) method: Option<&'a str>,
    pub(crate) path: Option<&'a str>,
    pub(crate) host: Option<&'a str>,
    pub(crate) headers: &'a BTreeMap<String, String>,
    pub(crate) api_key: Option<&'a str>,
    pub(crate) tenant: Option<&'a str>,
}

macro_rules! subject {
    ($body:expr) => {
        Subject {
            ip: $body.ip.as_deref(),
            method: $body.method.as_deref(),
            path: $body.path.as_deref(),
            host: $body.host.as_deref(),
            headers: &$body.headers,
            api_key: $body.api_key.as_deref(),
            tenant: $body.tenant.as_deref(),
        }
    };
}
pub(crate) use subject;

/// A subject read and checked: what [`ratewarden_policy::Request`] borrows.
pub(crate) struct Resolved<'a> {
    pub(crate) ip: IpAddr,
    pub(crate) method: &'a str,
    pub(crate) path: std::borrow::Cow<'a, str>,
    pub(crate) host: Option<&'a str>,
    pub(crate) headers: Vec<(&'a str, &'a str)>,
    pub(crate) api_key: Option<&'a str>,
    pub(crate) tenant: Option<&'a str>,
}

impl<'a> Subject<'a> {
    /// Checks the fields (a 422 naming the one that is wrong) and applies the defaults.
    pub(crate) fn resolve(self, peer: SocketAddr) -> Result<Resolved<'a>, Problem> {
        let ip = match self.ip {
            None => peer.ip(),
            Some(text) => match text.trim().parse::<IpAddr>() {
                Ok(ip) => ip,
                Err(_) => {
                    return Err(Problem::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!("`ip` must be an IPv4 or IPv6 address, not `{text}`"),
                    ))
                }
            },
        };
        let method = self.method.unwrap_or("GET");
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("`method` must be an HTTP method such as \"GET\", not `{method}`"),
            ));
        }
        let path = self.path.unwrap_or("/");
        if !path.starts_with('/') {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("`path` must start with `/`, not `{path}`"),
            ));
        }
        let path = path.split('?').next().unwrap_or(path);
        // The spelling the gateway would forward, so that every alias of a path is decided
        // as that path. A field the API cannot use is a 422.
        let path = match ratewarden_policy::path::normalize(path) {
            Ok(path) => path,
            Err(error) => {
                return Err(Problem::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("`path`: {error}"),
                ))
            }
        };
        Ok(Resolved {
            ip,
            method,
            path,
            host: self.host,
            headers: self
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect(),
            api_key: self.api_key,
            tenant: self.tenant,
        })
    }
}

impl Resolved<'_> {
    pub(crate) fn request(&self, cost: Option<u64>) -> ratewarden_policy::Request<'_> {
        ratewarden_policy::Request {
            peer: self.ip,
            method: self.method,
            path: &self.path,
            host: self.host,
            headers: &self.headers,
            cost,
            api_key: self.api_key,
            tenant: self.tenant,
            body: None,
            client_cert: None,
        }
    }
}
