//! `/v1/check`'s body read by hand when it is the plain object nearly every caller sends:
//! known fields, each once, strings without escapes, a whole-number cost, no `headers`.
//!
//! Through `serde_json` the body is a large share of the decision API's request (the derived
//! visitor, each field's name matched by its own pass, each value through `Option`'s and
//! `Cow`'s visitors; `docs/benchmarks.md`). Anything this reader does not take whole (an
//! escape, a duplicate or unknown field, `headers`, a number that is not a plain `u64`,
//! malformed JSON) gives `None`, and the body goes to `serde_json` as before, which then
//! accepts or refuses it with the same words as ever. What this reader does take it reads
//! exactly as `serde_json` does (a property test below holds it to that).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

/// A string of a request body, borrowed from the body unless it has escapes (serde does
/// not borrow through an `Option<Cow>`, hence the wrapper).
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
#[serde(transparent)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// `/v1/check`'s body. Its strings borrow from the body where they can (no escapes), one
/// allocation fewer each per request. Most bodies are read by hand (`check_json`), the
/// rest by serde.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckJson<'a> {
    /// The client's address; the API caller's own when absent.
    #[serde(borrow)]
    pub(crate) ip: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) method: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) path: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) host: Option<Text<'a>>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    #[serde(borrow)]
    pub(crate) api_key: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) tenant: Option<Text<'a>>,
    pub(crate) cost: Option<u64>,
}

/// The body as a [`CheckJson`], when it is plain enough to read here; `None` sends it to
/// `serde_json`.
pub(crate) fn read(body: &[u8]) -> Option<CheckJson<'_>> {
    // Checked once whole, not string by string (cheaper for the eight short strings of a
    // typical body). Not UTF-8 anywhere, the body is not JSON serde would take either. A string
    // is then cut out at its quotes, ASCII bytes, so always at a character's boundary.
    let text = std::str::from_utf8(body).ok()?;
    let mut r = Reader { text, body, at: 0 };
    let mut check = CheckJson {
        ip: None,
        method: None,
        path: None,
        host: None,
        headers: BTreeMap::new(),
        api_key: None,
        tenant: None,
        cost: None,
    };
    // Which fields were seen: a second one is serde's "duplicate field" error.
    let mut seen = 0u8;
    r.skip_space();
    r.eat(b'{')?;
    r.skip_space();
    if !r.eat_if(b'}') {
        loop {
            r.skip_space();
            let name = r.string()?;
            r.skip_space();
            r.eat(b':')?;
            r.skip_space();
            if name == "cost" {
                if seen & (1 << 6) != 0 {
                    return None;
                }
                seen |= 1 << 6;
                check.cost = if r.null() { None } else { Some(r.whole()?) };
            } else {
                let (bit, slot) = match name {
                    "ip" => (0, &mut check.ip),
                    "method" => (1, &mut check.method),
                    "path" => (2, &mut check.path),
                    "host" => (3, &mut check.host),
                    "api_key" => (4, &mut check.api_key),
                    "tenant" => (5, &mut check.tenant),
                    // `headers`, and a field `CheckJson` does not know (serde refuses it).
                    _ => return None,
                };
                if seen & (1 << bit) != 0 {
                    return None;
                }
                seen |= 1 << bit;
                *slot = if r.null() {
                    None
                } else {
                    Some(Text(Cow::Borrowed(r.string()?)))
                };
            }
            r.skip_space();
            if r.eat_if(b'}') {
                break;
            }
            r.eat(b',')?;
        }
    }
    r.skip_space();
    (r.at == body.len()).then_some(check)
}

struct Reader<'a> {
    text: &'a str,
    /// `text`'s bytes.
    body: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// JSON's whitespace, as `serde_json` skips it.
    fn skip_space(&mut self) {
        while matches!(self.body.get(self.at), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat_if(&mut self, b: u8) -> bool {
        let here = self.body.get(self.at) == Some(&b);
        self.at += usize::from(here);
        here
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.eat_if(b).then_some(())
    }

    fn null(&mut self) -> bool {
        let here = self.body[self.at..].starts_with(b"null");
        if here {
            self.at += 4;
        }
        here
    }

    /// A string with neither an escape nor a control character in it (either sends the
    /// body to `serde_json`), borrowed.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let rest = &self.body[self.at..];
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        let text = self.text.get(self.at..self.at + len)?;
        self.at += len + 1;
        Some(text)
    }

    /// A whole number in JSON's spelling (no sign, no leading zero, no fraction or
    /// exponent) that fits a `u64`.
    fn whole(&mut self) -> Option<u64> {
        let rest = &self.body[self.at..];
        let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let digits = &rest[..len];
        if len == 0 || (len > 1 && digits[0] == b'0') {
            return None;
        }
        if matches!(rest.get(len), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let mut n = 0u64;
        for &d in digits {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        self.at += len;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn serde(body: &[u8]) -> Option<CheckJson<'_>> {
        serde_json::from_slice(body).ok()
    }

    #[test]
    fn the_plain_body_is_read_here_borrowed() {
        let body = br#" {"ip":"203.0.113.7", "method" : "GET","path":"/orders","api_key":"k","tenant":null,"cost":7}
"#;
        let check = read(body).expect("read here");
        assert_eq!(Some(&check), serde(body).as_ref());
        assert!(matches!(check.api_key, Some(Text(Cow::Borrowed("k")))));
        assert_eq!(check.cost, Some(7));
        assert_eq!(read(b"{}"), serde(b"{}"));
    }

    #[test]
    fn what_serde_reads_otherwise_or_refuses_is_left_to_it() {
        for body in [
            &br#"{"path":"/a\"b"}"#[..],
            br#"{"path":"/a","path":"/b"}"#,
            br#"{"cost":1,"cost":2}"#,
            br#"{"headers":{}}"#,
            br#"{"what":1}"#,
            br#"{"cost":1e3}"#,
            br#"{"cost":01}"#,
            br#"{"cost":-1}"#,
            br#"{"cost":18446744073709551616}"#,
            br#"{"path":1}"#,
            br#"{"path":"/a",}"#,
            br#"{"path":"/a"} x"#,
            br#"{"pa\u0074h":"/a"}"#,
            b"{\"path\":\"/a\tb\"}",
            b"{\"path\":\"\xff\"}",
            br#"["path"]"#,
            b"",
        ] {
            assert_eq!(read(body), None, "{}", String::from_utf8_lossy(body));
        }
        assert_eq!(
            read(br#"{"cost":18446744073709551615}"#).and_then(|c| c.cost),
            Some(u64::MAX)
        );
    }

    /// Bodies made of pieces that are often right and sometimes wrong in each of the ways
    /// the reader must notice.
    fn bodies() -> impl Strategy<Value = String> {
        let name = prop_oneof![
            Just("ip"),
            Just("method"),
            Just("path"),
            Just("host"),
            Just("api_key"),
            Just("tenant"),
            Just("cost"),
            Just("headers"),
            Just("other"),
        ];
        let value = prop_oneof![
            "\"[ -~]{0,6}\"",
            "\"[a-z\\\\\u{e9}\t]{0,4}\"",
            Just("null".to_owned()),
            "[0-9]{1,21}",
            Just("-1".to_owned()),
            Just("1.5".to_owned()),
            Just("{}".to_owned()),
        ];
        let space = prop_oneof![Just(""), Just(" "), Just("\n\t ")];
        let field = (space.clone(), name, space.clone(), value)
            .prop_map(|(s, n, t, v)| format!("{s}\"{n}\"{t}:{s}{v}{t}"));
        (prop::collection::vec(field, 0..5), space, any::<bool>()).prop_map(
            |(fields, s, trailing)| {
                let tail = if trailing { "," } else { "" };
                format!("{s}{{{}{tail}}}{s}", fields.join(","))
            },
        )
    }

    proptest! {
        #[test]
        fn what_is_read_here_is_what_serde_json_reads(body in bodies()) {
            if let Some(check) = read(body.as_bytes()) {
                prop_assert_eq!(Some(check), serde(body.as_bytes()), "{}", body);
            }
        }

        #[test]
        fn a_body_of_known_fields_and_plain_strings_is_read_here(
            fields in prop::collection::btree_map(
                prop_oneof![Just("ip"), Just("method"), Just("path"), Just("api_key")],
                "[ -!#-\\[\\]-~\u{e9}]{0,8}",
                0..4,
            ),
        ) {
            let body = serde_json::to_string(&fields).unwrap();
            prop_assert_eq!(read(body.as_bytes()), serde(body.as_bytes()), "{}", body);
        }
    }
}
