//! One spelling per path: a request target normalized once, before rules match it.
//!
//! A rule on `/login` must see every spelling an upstream resolves to `/login`: `//login`,
//! `/%6Cogin`, `/./login` and `/x/../login` all reach an upstream's `/login`, and a limiter
//! matching the raw target would count each under another path. [`normalize`] applies the
//! normalizations of RFC 3986 §6.2.2 that every upstream agrees on, and refuses the spellings
//! upstreams disagree about, so that what is matched is what is forwarded:
//!
//! - percent-encoded unreserved characters (`%41`, `%2E`, `%7E`…) are decoded, and the hex
//!   digits of the encodings that remain are uppercased (§6.2.2.1, §6.2.2.2);
//! - dot segments are removed (§5.2.4; `..` never climbs above the root);
//! - runs of `/` collapse to one (not in RFC 3986, but nginx `merge_slashes`, most
//!   frameworks and many file servers do it, so an upstream may see `//login` as `/login`);
//! - refused: an encoded `/` (`%2F`) or `\` (`%5C`), any encoded control character (`%00`…
//!   `%1F`, `%7F`), a raw `\` (Windows and some proxies read it as `/`), a `;` (servlet
//!   containers cut `;jsessionid=…` path parameters, so `/login;x` is `/login` to them), a
//!   malformed `%` escape, and any character outside RFC 3986's `pchar` (spaces, `#`, `?`,
//!   non-ASCII: a request target never holds them raw).
//!
//! The query is not part of the path: split it off first.
//!
//! Past RFC 3986, many upstreams also serve `/login/`, `/LOGIN` and `/Login/` as `/login`
//! (case-insensitive routers, frameworks that redirect or strip a trailing slash), and
//! Rails (`(.:format)`) and Symfony (`{_format}`) serve `/login.json` and `/login.xml` as
//! `/login` in another format; a limiter must err towards limiting. So a rule's
//! `match.path` takes those aliases too unless it says `path_exact = true`: [`same_path`]
//! and [`path_under`] compare ignoring ASCII case, one trailing slash and a format suffix,
//! and [`fold`] is the one spelling a `route` key part keeps, so the aliases share one
//! budget. What is forwarded is the normalized path as the
//! client sent it, never the folded one.

use std::borrow::Cow;
use std::fmt;

/// Why a path was refused: it has no single meaning that every upstream agrees on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    /// The byte offset in the path where the problem starts.
    pub at: usize,
    /// What is wrong there.
    pub reason: &'static str,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the path is ambiguous at byte {}: {}",
            self.at, self.reason
        )
    }
}

impl std::error::Error for PathError {}

/// Normalizes `path` (a request target's path, without the query) as the module docs say.
///
/// A path already normal is borrowed, not copied.
///
/// # Errors
///
/// A path that does not start with `/`, or holds a spelling upstreams resolve differently
/// (see the module docs), with where it is.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::path::normalize;
///
/// for alias in ["/login", "//login", "/%6Cogin", "/./login", "/x/../login"] {
///     assert_eq!(normalize(alias).unwrap(), "/login");
/// }
/// assert_eq!(normalize("/a%2fb").unwrap_err().reason, "an encoded `/` (`%2F`)");
/// ```
pub fn normalize(path: &str) -> Result<Cow<'_, str>, PathError> {
    // Nearly every path is already in its one spelling: found so in one pass, without the
    // two buffers the rewrite fills.
    if is_canonical(path.as_bytes()) {
        return Ok(Cow::Borrowed(path));
    }
    rewrite(path)
}

/// Whether `normalize` would give `path` back as it is: it starts with `/`, holds only
/// `pchar`s and slashes (no escape, no `;` or `\`), no empty segment but a last one (a
/// trailing slash) and no `.` or `..` segment. What [`rewrite`] leaves unchanged; a path
/// this refuses still may be (the rewrite decides).
fn is_canonical(bytes: &[u8]) -> bool {
    if bytes.first() != Some(&b'/') {
        return false;
    }
    let mut start = 1;
    for i in 1..=bytes.len() {
        match bytes.get(i) {
            Some(b'/') | None => {
                let segment = &bytes[start..i];
                let last = i == bytes.len();
                if matches!(segment, b"." | b"..") || (segment.is_empty() && !last) {
                    return false;
                }
                start = i + 1;
            }
            Some(&b) if is_pchar(b) => {}
            Some(_) => return false,
        }
    }
    true
}

/// [`normalize`] the long way: every escape decoded or recased, every segment read.
fn rewrite(path: &str) -> Result<Cow<'_, str>, PathError> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(PathError {
            at: 0,
            reason: "a path must start with `/`",
        });
    }
    // Pass 1: check every byte and decode what may be decoded, into one buffer.
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'%' => {
                let hex = |j: usize| bytes.get(j).and_then(|&h| (h as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                    return Err(PathError {
                        at: i,
                        reason: "a `%` not followed by two hex digits",
                    });
                };
                let value = (hi * 16 + lo) as u8;
                let reason = match value {
                    b'/' => Some("an encoded `/` (`%2F`)"),
                    b'\\' => Some("an encoded `\\` (`%5C`)"),
                    0 => Some("an encoded NUL (`%00`)"),
                    0x01..=0x1f | 0x7f => Some("an encoded control character"),
                    _ => None,
                };
                if let Some(reason) = reason {
                    return Err(PathError { at: i, reason });
                }
                if is_unreserved(value) {
                    decoded.push(value);
                } else {
                    decoded.push(b'%');
                    decoded.extend_from_slice(format!("{value:02X}").as_bytes());
                }
                i += 3;
                continue;
            }
            b'\\' => {
                return Err(PathError {
                    at: i,
                    reason: "a `\\` (some upstreams read it as `/`)",
                })
            }
            b';' => {
                return Err(PathError {
                    at: i,
                    reason: "a `;` (servlet containers cut path parameters after it)",
                })
            }
            b'/' => decoded.push(b'/'),
            b if is_pchar(b) => decoded.push(b),
            _ => {
                return Err(PathError {
                    at: i,
                    reason: "a character a request target may not hold (a space, a control \
                             character, `#`, `?`, `\"`, `<`, `>`, `{`, `}`, `|`, `^`, a \
                             backtick or a non-ASCII byte)",
                })
            }
        }
        i += 1;
    }
    // Pass 2: segments, without empty ones (repeated slashes) or dot segments.
    let mut out: Vec<&[u8]> = Vec::new();
    let segments: Vec<&[u8]> = decoded.split(|&b| b == b'/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    // Whether the path ends in a directory (`/a/`, `/a/.`, `/a/..`): the trailing slash
    // is kept, as RFC 3986's algorithm keeps it, since `/a/` and `/a` may differ upstream.
    let mut trailing = false;
    for (n, segment) in segments.iter().enumerate() {
        match *segment {
            b"" => trailing = n == last,
            b"." => trailing = true,
            b".." => {
                out.pop();
                trailing = true;
            }
            _ => {
                out.push(segment);
                trailing = false;
            }
        }
    }
    let mut normal = Vec::with_capacity(decoded.len());
    for segment in &out {
        normal.push(b'/');
        normal.extend_from_slice(segment);
    }
    if trailing || out.is_empty() {
        normal.push(b'/');
    }
    if normal == bytes {
        return Ok(Cow::Borrowed(path));
    }
    // Only ASCII was let through, so this cannot fail.
    String::from_utf8(normal)
        .map(Cow::Owned)
        .map_err(|_| PathError {
            at: 0,
            reason: "not ASCII",
        })
}

/// Whether normalized paths `given` and `rule` name the same resource up to ASCII case,
/// one trailing slash and a format suffix (`/login/`, `/LOGIN`, `/Login/` and
/// `/login.json` are `/login`).
///
/// # Examples
///
/// ```
/// use ratewarden_policy::path::same_path;
///
/// for alias in ["/login", "/login/", "/LOGIN", "/Login/", "/login.json", "/Login.XML/"] {
///     assert!(same_path(alias, "/login"));
/// }
/// assert!(!same_path("/login/x", "/login"));
/// assert!(!same_path("/login.", "/login"));
/// assert!(same_path("/feed.xml", "/feed.xml"));
/// ```
pub fn same_path(given: &str, rule: &str) -> bool {
    let (given, rule) = (trim_slash(given.as_bytes()), trim_slash(rule.as_bytes()));
    given.eq_ignore_ascii_case(rule)
        || without_format(given).is_some_and(|given| given.eq_ignore_ascii_case(rule))
}

/// Whether normalized path `given` is under `prefix` (a rule's `path` without its `*`) up
/// to ASCII case; a prefix ending in `/` also takes the directory itself without it (`/api`
/// and `/api.json` are under `/api/`), as an upstream may serve them alike.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::path::path_under;
///
/// assert!(path_under("/API/Orders", "/api/"));
/// assert!(path_under("/api", "/api/"));
/// assert!(path_under("/api.json", "/api/"));
/// assert!(!path_under("/apix", "/api/"));
/// ```
pub fn path_under(given: &str, prefix: &str) -> bool {
    let (given, prefix) = (given.as_bytes(), prefix.as_bytes());
    let starts = given.len() >= prefix.len() && given[..prefix.len()].eq_ignore_ascii_case(prefix);
    let directory = |given: &[u8]| trim_slash(prefix).eq_ignore_ascii_case(given);
    starts
        || (prefix.ends_with(b"/")
            && (directory(given) || without_format(given).is_some_and(directory)))
}

/// The one spelling of a normalized path's aliases by ASCII case, trailing slash and
/// format suffix: lowercase, without a trailing slash (but `/` stays `/`) or a format
/// suffix. Borrowed when already so.
///
/// # Examples
///
/// ```
/// use ratewarden_policy::path::fold;
///
/// assert_eq!(fold("/Login/"), "/login");
/// assert_eq!(fold("/Login.JSON"), "/login");
/// assert_eq!(fold("/"), "/");
/// ```
pub fn fold(path: &str) -> Cow<'_, str> {
    let bytes = trim_slash(path.as_bytes());
    let bytes = without_format(bytes).unwrap_or(bytes);
    let trimmed = &path[..bytes.len()];
    if bytes.iter().any(u8::is_ascii_uppercase) {
        Cow::Owned(trimmed.to_ascii_lowercase())
    } else {
        Cow::Borrowed(trimmed)
    }
}

/// `path` without a format suffix (`.json` in `/login.json`: a last segment's last dot
/// and what follows, neither empty), as Rails' `(.:format)` and Symfony's `{_format}`
/// route it to the path without it; `None` when it has none.
fn without_format(path: &[u8]) -> Option<&[u8]> {
    let segment = path.iter().rposition(|&b| b == b'/')? + 1;
    let dot = segment + path[segment..].iter().rposition(|&b| b == b'.')?;
    (dot > segment && dot + 1 < path.len()).then(|| &path[..dot])
}

/// `path` without one trailing `/`, unless it is the root.
fn trim_slash(path: &[u8]) -> &[u8] {
    match path {
        [rest @ .., b'/'] if !rest.is_empty() => rest,
        _ => path,
    }
}

/// RFC 3986 §2.3.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 §3.3 `pchar`, less `%` (escapes are read apart) and `;` (refused).
fn is_pchar(b: u8) -> bool {
    is_unreserved(b)
        || matches!(
            b,
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b'=' | b':' | b'@'
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_aliases_of_the_issue_all_become_login() {
        for alias in [
            "/login",
            "//login",
            "/%6Cogin",
            "/%6cogin",
            "/./login",
            "/x/../login",
            "/x/%2E%2E/login",
            "/../login",
            "///./x/y/../../login",
        ] {
            assert_eq!(normalize(alias).unwrap(), "/login", "{alias}");
        }
    }

    #[test]
    fn canonical_paths_take_the_fast_path_and_aliases_do_not() {
        for path in ["/", "/login", "/a/", "/a/b.c/~d", "/a.b/..c/.d"] {
            assert!(is_canonical(path.as_bytes()), "{path}");
            assert!(matches!(normalize(path), Ok(Cow::Borrowed(p)) if p == path));
        }
        for path in [
            "", "x", "//", "/a//b", "/.", "/..", "/a/./b", "/a/../b", "/a/.", "/%41", "/a;b",
            "/a\\b", "/a b", "/é",
        ] {
            assert!(!is_canonical(path.as_bytes()), "{path}");
        }
    }

    #[test]
    fn directories_keep_their_trailing_slash() {
        assert_eq!(normalize("/").unwrap(), "/");
        assert_eq!(normalize("//").unwrap(), "/");
        assert_eq!(normalize("/a/").unwrap(), "/a/");
        assert_eq!(normalize("/a//").unwrap(), "/a/");
        assert_eq!(normalize("/a/.").unwrap(), "/a/");
        assert_eq!(normalize("/a/b/..").unwrap(), "/a/");
        assert_eq!(normalize("/a/..").unwrap(), "/");
        assert_eq!(normalize("/..").unwrap(), "/");
    }

    #[test]
    fn reserved_escapes_stay_encoded_in_uppercase() {
        assert_eq!(normalize("/a%3fb").unwrap(), "/a%3Fb");
        assert_eq!(normalize("/%7e%41%2d").unwrap(), "/~A-");
        assert_eq!(normalize("/caf%c3%a9").unwrap(), "/caf%C3%A9");
        assert_eq!(normalize("/a%25b").unwrap(), "/a%25b");
    }

    #[test]
    fn a_normal_path_is_borrowed() {
        assert!(matches!(
            normalize("/orders/7").unwrap(),
            Cow::Borrowed("/orders/7")
        ));
    }

    #[test]
    fn ambiguous_paths_are_refused_where_they_go_wrong() {
        for (path, at) in [
            ("/a%2Fb", 2),
            ("/a%2fb", 2),
            ("/a%5Cb", 2),
            ("/a\\login", 2),
            ("/login%00", 6),
            ("/login%0a", 6),
            ("/login;jsessionid=1", 6),
            ("/a%zz", 2),
            ("/a%4", 2),
            ("/a b", 2),
            ("/a#b", 2),
            ("/caf\u{e9}", 4),
            ("login", 0),
            ("", 0),
        ] {
            let error = normalize(path).unwrap_err();
            assert_eq!(error.at, at, "{path}: {error}");
        }
    }

    #[test]
    fn case_and_trailing_slash_aliases_are_one_path() {
        for alias in ["/login", "/login/", "/LOGIN", "/Login/", "/lOgIn"] {
            assert!(same_path(alias, "/login"), "{alias}");
            assert!(same_path("/login", alias), "{alias}");
            assert_eq!(fold(alias), "/login");
        }
        assert!(!same_path("/login2", "/login"));
        assert!(!same_path("/logi", "/login"));
        assert!(same_path("/", "/"));
        assert!(!same_path("/", "/a"));
        assert!(path_under("/Reports/2024", "/reports/"));
        assert!(path_under("/REPORTS", "/reports/"));
        assert!(!path_under("/reportsx", "/reports/"));
        assert!(path_under("/anything", "/"));
        assert!(path_under("/", "/"));
        assert!(matches!(fold("/already/lower"), Cow::Borrowed(_)));
        // Byte-wise, so a prefix ending inside a character cannot panic.
        assert!(!path_under("/\u{e9}", "/\u{e8}"));
        assert!(path_under("/\u{e9}a", "/\u{e9}"));
    }

    /// Paths built from the pieces aliases are made of.
    fn paths() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("/".to_owned()),
            Just("//".to_owned()),
            Just("/.".to_owned()),
            Just("/..".to_owned()),
            Just("/%2E".to_owned()),
            Just("/%2e%2E".to_owned()),
            Just("%6C".to_owned()),
            Just("%3f".to_owned()),
            "[a-zA-Z0-9._~!$&'()*+,=:@-]{1,4}",
        ];
        prop::collection::vec(piece, 0..12).prop_map(|pieces| format!("/{}", pieces.concat()))
    }

    proptest! {
        #[test]
        fn normalizing_is_idempotent_and_leaves_no_alias(path in paths()) {
            let once = normalize(&path).unwrap().into_owned();
            prop_assert_eq!(normalize(&once).unwrap(), once.as_str());
            prop_assert!(once.starts_with('/'));
            prop_assert!(!once.contains("//"), "{}", once);
            prop_assert!(!once.contains("/./"), "{}", once);
            prop_assert!(!once.contains("/../"), "{}", once);
            prop_assert!(!once.ends_with("/.") && !once.ends_with("/.."), "{}", once);
            // Lowercase hex never survives, nor an encoded unreserved character.
            for escape in once.match_indices('%') {
                let hex = &once[escape.0 + 1..escape.0 + 3];
                prop_assert_eq!(hex, hex.to_ascii_uppercase());
                let value = u8::from_str_radix(hex, 16).unwrap();
                prop_assert!(!is_unreserved(value), "{}", once);
            }
        }

        #[test]
        fn the_fast_path_agrees_with_the_rewrite(path in paths()) {
            if is_canonical(path.as_bytes()) {
                prop_assert_eq!(rewrite(&path).unwrap(), path.as_str());
            }
            prop_assert_eq!(normalize(&path).unwrap(), rewrite(&path).unwrap());
        }

        #[test]
        fn the_fast_path_agrees_with_the_rewrite_on_any_string(path in "\\PC{0,20}") {
            if is_canonical(path.as_bytes()) {
                prop_assert_eq!(rewrite(&path).unwrap(), path.as_str());
            }
            prop_assert_eq!(normalize(&path).ok(), rewrite(&path).ok());
        }

        #[test]
        fn any_string_is_normalized_or_refused_never_a_panic(path in "/\\PC{0,40}") {
            if let Ok(once) = normalize(&path) {
                let once = once.into_owned();
                prop_assert_eq!(normalize(&once).unwrap(), once.as_str());
                prop_assert!(!once.contains("//"));
            }
        }
    }
}
