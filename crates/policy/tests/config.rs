//! The config file: what it accepts, and every error, with its message asserted.

use std::time::Duration;

use ratewarden_core::AlgorithmKind;
use ratewarden_policy::config::parse;
use ratewarden_policy::{ClientIpHeader, KeyPart, Mode, OnStoreFailure, StoreKind};

const EXAMPLE: &str = include_str!("../../../examples/ratewarden.toml");

#[test]
fn the_example_config_is_valid() {
    let config = parse("examples/ratewarden.toml", EXAMPLE).unwrap();
    let names: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "per-ip",
            "per-key",
            "monthly",
            "exports-in-flight",
            "login",
            "global"
        ]
    );
    let login = &config.rules[4];
    assert_eq!(login.limit.kind(), AlgorithmKind::SlidingLog);
    assert!(login.sensitive);
    assert_eq!(login.on_store_failure, OnStoreFailure::Closed);
    assert_eq!(login.matches.method.as_deref(), Some("POST"));
    assert!(matches!(login.key[0], KeyPart::Ip(_)));
    assert_eq!(config.rules[5].mode, Mode::Shadow);
    assert!(config.trusted_proxies.contains("10.2.3.4".parse().unwrap()));
}

/// Parses `body` as the only limit of a file and returns its errors, one a line.
fn errors(body: &str) -> String {
    refused("test.toml", &format!("[[limit]]\n{body}\n"))
}

/// Parses `text` as the file `file` and returns its errors, one a line.
fn refused(file: &str, text: &str) -> String {
    match parse(file, text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_error_says_where_and_what() {
    let gcra = "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\n";
    let cases: &[(String, &str)] = &[
        (
            format!("{gcra}rate = \"50/s\"\nburst = 10\nalgoritm = \"x\""),
            "test.toml:7:1: unknown field `algoritm`",
        ),
        (
            format!("{gcra}rate = \"50/s\"\nburst = 10\nalgoritm = \"x\""),
            "did you mean `algorithm`?",
        ),
        (
            "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"slidinglog\"\nlimit = 1\nwindow = \"1s\"".to_owned(),
            "test.toml:4:13: limit `k`: `algorithm`: unknown algorithm `slidinglog`; known algorithms: fixed-window",
        ),
        (
            "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"slidinglog\"\nlimit = 1\nwindow = \"1s\"".to_owned(),
            "did you mean `sliding-log`?",
        ),
        (format!("{gcra}rate = \"50\"\nburst = 10"), "test.toml:5:8: limit `k`: `rate`: invalid rate `50`: no `/`"),
        (format!("{gcra}rate = \"50/s\"\nburst = 0"), "test.toml:6:9: limit `k`: `burst` must be a whole number above zero, not 0"),
        (format!("{gcra}rate = \"50/s\""), "limit `k`: `gcra` needs `burst`"),
        (format!("{gcra}rate = \"50/s\"\nburst = 5\nwindow = \"1s\""), "`window` does not apply to `gcra`, which takes rate and burst"),
        (
            "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"15\"".to_owned(),
            "test.toml:6:10: limit `k`: `window`: invalid duration `15`: no unit",
        ),
        (
            "name = \"q\"\nkey = [\"api_key\"]\nalgorithm = \"quota\"\nlimit = 5\nperiod = \"fortnight\"".to_owned(),
            "limit `q`: `period`: unknown calendar period `fortnight`",
        ),
        (
            "name = \"q\"\nkey = [\"api_key\"]\nalgorithm = \"quota\"\nlimit = 5\nperiod = \"month\"\ntimezone = \"Mars/Base\"".to_owned(),
            "test.toml:7:12: limit `q`: `timezone`: unknown time zone `Mars/Base`",
        ),
        (format!("{gcra}rate = \"50/s\"\nburst = 5\nmode = \"dry-run\""), "`mode` is `enforce` or `shadow`, not `dry-run`"),
        (format!("{gcra}rate = \"50/s\"\nburst = 5\nrollout = \"150%\""), "`rollout` is a percentage from 0% to 100%"),
        (format!("{gcra}rate = \"50/s\"\nburst = 5\non_store_failure = \"maybe\""), "`on_store_failure` is `open`, `closed` or `local`, not `maybe`"),
        (format!("{gcra}rate = \"50/s\"\nburst = 5\ncost = -2"), "`cost` cannot be negative (-2)"),
        (
            format!("{gcra}rate = \"50/s\"\nburst = 5\ncost = \"header:x-tokens\""),
            "test.toml:7:8: limit `k`: a cost read from a header needs `max_cost`",
        ),
        (format!("{gcra}rate = \"50/s\"\nburst = 5\ncost = \"lots\""), "`cost` is a whole number, \"header:NAME\", or an estimate from the JSON body (\"json:max_tokens + bytes/4\"), not `lots`: `lots` is not `json:PATH`, `bytes/N` or a whole number"),
        (format!("{gcra}rate = \"50/s\"\nburst = 5\nsettle = \"soon\""), "`settle`: invalid duration `soon`"),
        (
            format!("{gcra}rate = \"50/s\"\nburst = 5\non_store_failure = \"local\"\nlocal_divide_by = 0"),
            "`local_divide_by` must be a whole number above zero",
        ),
        (format!("{gcra}rate = \"50/s\"\nburst = 5\nipv6_prefix = 130"), "a prefix length between 0 and 128, not 130"),
        (
            "name = \"k\"\nkey = [\"ipp\"]\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1".to_owned(),
            "test.toml:3:8: limit `k`: unknown key part `ipp`: use ip, header:NAME, api_key, tenant, route, global, descriptor, bucket, json:PATH or literal:TEXT; did you mean `ip`?",
        ),
        (
            "name = \"k\"\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1".to_owned(),
            "limit `k`: `key` is missing",
        ),
        ("key = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1".to_owned(), "a `[[limit]]` needs a `name`"),
        ("name = \"k\"\nkey = [\"ip\"]\nrate = \"1/s\"\nburst = 1".to_owned(), "`algorithm` is missing; one of: fixed-window"),
        (format!("{gcra}rate = \"50/s\"\nburst = \"ten\""), "test.toml:6:9: invalid type: string \"ten\", expected i64"),
        // One spelling: another is refused with the docs' own, never read as it silently.
        (
            "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"token_bucket\"\nrate = \"1/s\"\nburst = 1".to_owned(),
            "test.toml:4:13: limit `k`: `algorithm`: unknown algorithm `token_bucket`",
        ),
        (
            "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"TOKEN_BUCKET\"\nrate = \"1/s\"\nburst = 1".to_owned(),
            "did you mean `token-bucket`?",
        ),
        (
            "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"Fixed-Window\"\nlimit = 1\nwindow = \"1s\"".to_owned(),
            "did you mean `fixed-window`?",
        ),
        // Every algorithm in the list, the adaptive one included.
        (
            "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"slidinglog\"\nlimit = 1\nwindow = \"1s\"".to_owned(),
            "gcra, quota, concurrency, adaptive-concurrency;",
        ),
        (
            "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"adaptive_concurrency\"".to_owned(),
            "did you mean `adaptive-concurrency`?",
        ),
    ];
    for (body, want) in cases {
        let got = errors(body);
        assert!(
            got.contains(want),
            "for:\n{body}\nwanted: {want}\ngot:    {got}"
        );
    }
}

#[test]
fn all_errors_are_reported_at_once_and_names_must_be_unique() {
    let text = "\
[[limit]]
name = \"a\"
key = [\"ip\"]
algorithm = \"gcra\"
rate = \"x\"
burst = 0

[[limit]]
name = \"a\"
key = [\"ip\"]
algorithm = \"fixed-window\"
limit = 1
window = \"1s\"

[[limit]]
name = \"a\"
key = [\"ip\"]
algorithm = \"fixed-window\"
limit = 1
window = \"1s\"
";
    let err = parse("many.toml", text).unwrap_err();
    let messages: Vec<String> = err.0.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert!(
        messages[0].starts_with("many.toml:5:8: limit `a`: `rate`"),
        "{messages:#?}"
    );
    assert!(messages[1].starts_with("many.toml:6:9: limit `a`: `burst`"));
    assert!(
        messages[2].starts_with("many.toml:16:8: limit `a`: the name is used by another limit"),
        "{messages:#?}"
    );
}

#[test]
fn bad_trusted_proxies_and_unknown_sections_are_errors() {
    let err = parse(
        "s.toml",
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"lan\"]\n",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("s.toml:2:34: `trusted_proxies`: `lan` is not an address"),
        "{err}"
    );
    let err = parse("s.toml", "[sever]\nlisten = \"x\"\n").unwrap_err();
    assert!(err.to_string().contains("unknown field `sever`"), "{err}");
}

#[test]
fn client_ip_header_defaults_to_x_forwarded_for_and_a_bad_one_is_located() {
    let config = parse("s.toml", "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n").unwrap();
    assert_eq!(
        *config.trusted_proxies.header(),
        ClientIpHeader::XForwardedFor
    );
    let config = parse(
        "s.toml",
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\nclient_ip_header = \"CF-Connecting-IP\"\n",
    )
    .unwrap();
    assert_eq!(config.trusted_proxies.header().name(), "cf-connecting-ip");
    for (value, says) in [
        ("x_real_ip", "`x_real_ip` has `_`"),
        ("Host", "`Host` never carries the client's address"),
        ("X Real IP", "`X Real IP` is not a header name"),
    ] {
        let text = format!("[server]\nlisten = \"127.0.0.1:0\"\nclient_ip_header = \"{value}\"\n");
        let err = parse("s.toml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("s.toml:3:20: `client_ip_header`: {says}")),
            "{err}"
        );
    }
}

#[test]
fn the_store_section_is_validated() {
    let config = parse(
        "s.toml",
        "[store]\nkind = \"memory\"\nmax_keys = 5_000\nwhen_full = \"reject\"\n",
    )
    .unwrap();
    assert_eq!(config.store.max_keys, 5_000);
    assert!(!config.store.evict_when_full);
    assert_eq!(
        parse("d.toml", "").unwrap().store.max_bytes,
        256 << 20,
        "the in-memory store's own default"
    );
    let config = parse(
        "s.toml",
        "[store]\nkind = \"redis-sentinel\"\nsentinels = [\"redis://:spw@s1:26379\", \"redis://:spw@s2:26379\"]\n\
         master_name = \"mymaster\"\nmaster_username = \"app\"\nmaster_password = \"pw\"\nmaster_tls = true\n\
         wait_for_replicas = 1\n",
    )
    .unwrap();
    assert_eq!(
        config.store.kind,
        StoreKind::RedisSentinel {
            sentinels: vec![
                "redis://:spw@s1:26379".to_owned(),
                "redis://:spw@s2:26379".to_owned()
            ],
            master_name: "mymaster".to_owned(),
            username: Some("app".to_owned()),
            password: Some("pw".to_owned()),
            tls: true,
        }
    );
    assert_eq!(config.store.wait_for_replicas, 1);
    let config = parse("s.toml", "[store]\nmax_bytes = 1_048_576\n").unwrap();
    assert_eq!(config.store.max_bytes, 1 << 20);
    let cases = [
        (
            "[store]\nkind = \"etcd\"\n",
            "s.toml:2:8: `[store]`: `kind` is `memory`, `redis`, `redis-cluster` or `redis-sentinel`, not `etcd`",
        ),
        (
            "[store]\nkind = \"redis\"\n",
            "`kind = \"redis\"` needs `url`",
        ),
        (
            "[store]\nmax_keys = 0\n",
            "s.toml:2:12: `[store]`: `max_keys` must be a whole number above zero, not 0",
        ),
        (
            "[store]\nwhen_full = \"panic\"\n",
            "`when_full` is `evict` or `reject`, not `panic`",
        ),
        (
            "[store]\nmax_bytes = 0\n",
            "s.toml:2:13: `[store]`: `max_bytes` must be a whole number above zero, not 0",
        ),
        (
            "[store]\nmax_bytes = 4096\n",
            "s.toml:2:13: `[store]`: `max_bytes` must be at least 65536 (64 KiB: the store holds its keys in 64 shards, each its share), not 4096",
        ),
        (
            "[store]\nkind = \"redis-sentinel\"\nmaster_name = \"m\"\n",
            "s.toml:2:8: `[store]`: `kind = \"redis-sentinel\"` needs `sentinels`",
        ),
        (
            "[store]\nkind = \"redis-sentinel\"\nsentinels = [\"redis://s:26379\"]\n",
            "`kind = \"redis-sentinel\"` needs `master_name`",
        ),
        (
            "[store]\nkind = \"redis\"\nurl = \"redis://r:6379\"\nmaster_name = \"m\"\n",
            "s.toml:4:15: `[store]`: `master_name` applies only to `kind = \"redis-sentinel\"` (the store is `redis`)",
        ),
        (
            "[store]\nkind = \"redis-cluster\"\nnodes = [\"redis://a:6379\"]\nwait_for_replicas = 1\n",
            "`wait_for_replicas` applies only to `kind = \"redis\"` and `kind = \"redis-sentinel\"`",
        ),
        (
            "[store]\nkind = \"redis\"\nurl = \"redis://r:6379\"\nwait_for_replicas = -1\n",
            "s.toml:4:21: `[store]`: `wait_for_replicas` must be a whole number zero or more, not -1",
        ),
        ("[store]\nmax_key = 5\n", "unknown field `max_key`"),
        ("[store]\nmax_key = 5\n", "did you mean `max_keys`?"),
    ];
    for (text, want) in cases {
        let got = parse("s.toml", text).unwrap_err().to_string();
        assert!(got.contains(want), "wanted {want}\ngot {got}");
    }
}

#[test]
fn a_rule_waits_for_replicas_behind_sentinel_when_it_fails_closed() {
    const SENTINEL: &str = "[store]\nkind = \"redis-sentinel\"\nsentinels = [\"redis://s1:26379\"]\nmaster_name = \"m\"\n";
    const REDIS: &str = "[store]\nkind = \"redis\"\nurl = \"redis://r:6379\"\n";
    let rule = |name: &str, extra: &str| {
        format!(
            "[[limit]]\nname = \"{name}\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 5\nwindow = \"1h\"\n{extra}\n"
        )
    };
    let waits = |text: String| -> Vec<(String, u32)> {
        let config = parse("w.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        config
            .rules
            .iter()
            .map(|r| (r.name.clone(), r.wait_for_replicas))
            .collect()
    };
    let closed = "on_store_failure = \"closed\"";
    // Behind Sentinel: a closed rule waits for one replica, any other for none, and a rule
    // says otherwise for itself.
    let text = format!(
        "{SENTINEL}{}{}{}{}",
        rule("pay", closed),
        rule("browse", ""),
        rule("login", &format!("{closed}\nwait_for_replicas = 2")),
        rule("cheap", &format!("{closed}\nwait_for_replicas = 0")),
    );
    let want = [("pay", 1), ("browse", 0), ("login", 2), ("cheap", 0)];
    let want: Vec<(String, u32)> = want.iter().map(|(n, w)| ((*n).to_owned(), *w)).collect();
    assert_eq!(waits(text), want);
    // One server (which may have no replica): none unless asked; in memory: none.
    let text = format!(
        "{REDIS}{}{}",
        rule("pay", closed),
        rule("audit", "wait_for_replicas = 1")
    );
    let want = vec![("pay".to_owned(), 0), ("audit".to_owned(), 1)];
    assert_eq!(waits(text), want);
    assert_eq!(waits(rule("pay", closed)), vec![("pay".to_owned(), 0)]);
    // The store's own wait is every rule's floor.
    let text = format!("{SENTINEL}wait_for_replicas = 2\n{}", rule("browse", ""));
    assert_eq!(waits(text), vec![("browse".to_owned(), 2)]);

    let cases = [
        (
            rule("pay", "wait_for_replicas = 1"),
            "w.toml:7:21: limit `pay`: `wait_for_replicas` applies to a Redis store",
        ),
        (
            format!(
                "[store]\nkind = \"redis-cluster\"\nnodes = [\"redis://a:6379\"]\n{}",
                rule("pay", "wait_for_replicas = 1")
            ),
            "limit `pay`: `wait_for_replicas` applies to `kind = \"redis\"` and `kind = \"redis-sentinel\"`",
        ),
        (
            format!("{REDIS}{}", rule("pay", "wait_for_replicas = -1")),
            "limit `pay`: `wait_for_replicas` must be a whole number zero or more, not -1",
        ),
        (
            format!("{REDIS}{}", rule("pay", "prefetch = \"50ms\"\nwait_for_replicas = 1")),
            "`wait_for_replicas` applies to rules decided by one store call each",
        ),
        (
            format!("{REDIS}wait_for_replicas = 2\n{}", rule("pay", "wait_for_replicas = 1")),
            "`wait_for_replicas` is below `[store] wait_for_replicas`",
        ),
    ];
    for (text, want) in cases {
        let got = parse("w.toml", &text).unwrap_err().to_string();
        assert!(got.contains(want), "wanted {want}\ngot {got}");
    }
}

#[test]
fn the_server_section_is_validated() {
    let config = parse(
        "s.toml",
        r#"
[server]
listen = "0.0.0.0:8000"
api = "[::1]:8001"
admin = "off"
upstream = "http://127.0.0.1:3000/"
legacy_headers = true
retry_after_jitter = "2s"
max_in_flight = 100
queue_timeout = "20ms"
critical = [{ method = "POST", path = "/payments*" }]
"#,
    )
    .unwrap();
    let server = &config.server;
    assert_eq!(server.listen.to_string(), "0.0.0.0:8000");
    assert_eq!(server.api.unwrap().to_string(), "[::1]:8001");
    assert_eq!(server.admin, None);
    assert_eq!(server.upstream.as_deref(), Some("http://127.0.0.1:3000"));
    assert!(server.legacy_headers);
    assert_eq!(server.retry_after_jitter.as_secs(), 2);
    assert_eq!(
        server.critical_reserve, 10,
        "a tenth of max_in_flight by default"
    );
    assert_eq!(server.queue_timeout.as_millis(), 20);
    assert_eq!(server.critical[0].method.as_deref(), Some("POST"));

    let defaults = parse("d.toml", "").unwrap().server;
    assert_eq!(defaults.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(defaults.admin.unwrap().to_string(), "127.0.0.1:9090");
    assert_eq!(defaults.upstream, None);

    let wrong = |text: &str| parse("s.toml", text).unwrap_err().to_string();
    assert_eq!(
        wrong("[server]\nlisten = \"localhost\"\n"),
        "s.toml:2:10: `[server]`: `listen` must be an address with a port, such as \"127.0.0.1:8080\" or \"[::1]:8080\", not `localhost`"
    );
    assert_eq!(
        wrong("[server]\nupstream = \"https://api.internal\"\n"),
        "s.toml:2:12: `[server]`: `upstream`: must start with `http://` (HTTP/1.1) or `h2c://` (HTTP/2, such as a gRPC service) (TLS to the upstream is not supported yet), not `https://api.internal`"
    );
    assert!(wrong("[server]\nupstream = \"http://a/b\"\n").contains("without a path"));
    assert_eq!(
        wrong("[server]\nmax_in_flight = 10\ncritical_reserve = 10\n"),
        "s.toml:3:20: `[server]`: `critical_reserve` (10) must be below `max_in_flight` (10), or nothing but critical routes gets through"
    );
    assert!(wrong("[server]\nmax_in_flight = 0\n")
        .contains("`max_in_flight` must be a whole number above zero, not 0"));
    assert!(wrong("[server]\nqueue_timeout = \"soon\"\n")
        .starts_with("s.toml:2:17: `[server]`: `queue_timeout`"));
    assert!(wrong("[server]\nlisen = \"x\"\n").contains("did you mean `listen`?"));
    assert_eq!(
        wrong("[store]\nkind = \"redis\"\nurl = \"redis://r\"\ndeadline = \"0s\"\n"),
        "s.toml:4:12: `[store]`: `deadline` must be longer than zero"
    );
}

/// Issue 12: a blank name was accepted, and one with control characters was written raw
/// into every message, log line and metric label that names the rule.
#[test]
fn rule_names_may_not_be_blank_nor_hold_control_characters() {
    let rest = "key = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5";
    assert_eq!(
        errors(&format!("name = \"  \"\n{rest}")),
        "test.toml:2:8: `name` must not be empty"
    );
    assert_eq!(
        errors(&format!("name = \"a\\nb\\u001b[31m\"\n{rest}")),
        "test.toml:2:8: `name` must not hold control characters, and `a\\nb\\u{1b}[31m` holds U+000A",
    );
    // Its other errors still name the rule, escaped.
    let both =
        errors("name = \"a\\tb\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 0");
    assert!(
        both.contains("limit `a\\tb`: `burst` must be a whole number above zero, not 0"),
        "{both}"
    );
    assert!(!both.contains('\t'), "{both}");
}

/// Found by `tests/fuzz.rs`: a dotted key or table header of a hundred parts reaches the
/// toml reader's recursion limit, for which it names no place; the error had no line.
#[test]
fn a_key_nested_past_the_recursion_limit_is_located() {
    let deep = vec!["a"; 100].join(".");
    for text in [
        format!("[server]\nlisten = \"127.0.0.1:1\"\n\n[[limit]]\n  match.{deep} = 1\n"),
        format!("[keys]\n\n[limit.{deep}]\nx = 1\n"),
    ] {
        let errors = parse("deep.toml", &text).unwrap_err();
        let shown = errors.to_string();
        assert!(shown.contains("recursion limit"), "{shown}");
        let line = if text.starts_with("[server]") {
            "5:3"
        } else {
            "3:1"
        };
        assert!(shown.starts_with(&format!("deep.toml:{line}: ")), "{shown}");
    }
}

/// A count that does not fit its field said it "must be a whole number above zero".
#[test]
fn a_count_too_large_for_its_field_says_so() {
    let text = "[store]\nbreaker_failures = 5000000000\n";
    let errors = parse("big.toml", text).unwrap_err().to_string();
    assert_eq!(
        errors,
        "big.toml:2:20: `[store]`: `breaker_failures` is too large: 5000000000"
    );
}

/// Issue 12's bounds on slow and greedy peers were constants; they are `[server]` fields,
/// each validated where it stands.
#[test]
fn the_gateway_bounds_are_server_fields_checked_where_they_stand() {
    let config = parse(
        "b.toml",
        r#"
[server]
header_read_timeout = "2s"
idle_timeout = "9s"
max_header_bytes = 16_384
api_body_timeout = "3s"
body_idle_timeout = "4s"
body_min_rate = 0
body_rate_grace = "5s"
upstream_connect_timeout = "250ms"
upstream_response_timeout = "6s"
upstream_idle_timeout = "7s"
upstream_pool_idle = "8s"
max_connections_per_client = 2
"#,
    )
    .unwrap();
    let b = config.server.bounds;
    let secs = |d: std::time::Duration| d.as_secs_f64();
    assert_eq!(secs(b.header_read_timeout), 2.0);
    assert_eq!(secs(b.idle_timeout), 9.0);
    assert_eq!(b.max_header_bytes, 16_384);
    assert_eq!(secs(b.api_body_timeout), 3.0);
    assert_eq!(secs(b.body_idle_timeout), 4.0);
    assert_eq!(b.body_min_rate, 0, "zero is no minimum rate");
    assert_eq!(secs(b.body_rate_grace), 5.0);
    assert_eq!(b.upstream_connect_timeout.as_millis(), 250);
    assert_eq!(secs(b.upstream_response_timeout), 6.0);
    assert_eq!(secs(b.upstream_idle_timeout), 7.0);
    assert_eq!(secs(b.upstream_pool_idle), 8.0);
    assert_eq!(b.max_connections_per_client, 2);

    // The defaults are the constants they replace.
    let d = parse("d.toml", "").unwrap().server.bounds;
    assert_eq!(d, ratewarden_policy::Bounds::default());
    assert_eq!(
        (d.header_read_timeout.as_secs(), d.max_header_bytes),
        (10, 65_536)
    );
    assert_eq!(
        (d.api_body_timeout.as_secs(), d.body_idle_timeout.as_secs()),
        (10, 10)
    );
    assert_eq!((d.body_min_rate, d.body_rate_grace.as_secs()), (1024, 10));
    assert_eq!(
        (
            d.upstream_connect_timeout.as_secs(),
            d.upstream_response_timeout.as_secs(),
            d.upstream_idle_timeout.as_secs(),
            d.upstream_pool_idle.as_secs()
        ),
        (5, 30, 30, 60)
    );
    assert_eq!(d.max_connections_per_client, 256);
    assert_eq!(d.idle_timeout.as_secs(), 75, "nginx's keepalive_timeout");

    let wrong = |line: &str| {
        parse("b.toml", &format!("[server]\n{line}\n"))
            .unwrap_err()
            .to_string()
    };
    for field in [
        "header_read_timeout",
        "idle_timeout",
        "api_body_timeout",
        "body_idle_timeout",
        "body_rate_grace",
        "upstream_connect_timeout",
        "upstream_response_timeout",
        "upstream_idle_timeout",
        "upstream_pool_idle",
    ] {
        let column = field.len() + 4;
        assert_eq!(
            wrong(&format!("{field} = \"0s\"")),
            format!("b.toml:2:{column}: `[server]`: `{field}` must be longer than zero")
        );
        assert!(
            wrong(&format!("{field} = \"soon\""))
                .starts_with(&format!("b.toml:2:{column}: `[server]`: `{field}`: ")),
            "{field}"
        );
    }
    assert_eq!(
        wrong("max_connections_per_client = 0"),
        "b.toml:2:30: `[server]`: `max_connections_per_client` must be a whole number above zero, not 0"
    );
    assert_eq!(
        wrong("body_min_rate = -1"),
        "b.toml:2:17: `[server]`: `body_min_rate` must be a whole number zero or more, not -1"
    );
    assert_eq!(
        wrong("max_header_bytes = 0"),
        "b.toml:2:20: `[server]`: `max_header_bytes` must be a whole number above zero, not 0"
    );
    // Below hyper's floor the server would panic at start: refused here instead.
    assert_eq!(
        wrong("max_header_bytes = 4096"),
        "b.toml:2:20: `[server]`: `max_header_bytes` must be at least 8192 (8 KiB, the HTTP parser's floor), not 4096"
    );
    assert!(wrong("max_headers_bytes = 9000").contains("did you mean `max_header_bytes`?"));
}

/// Requests are matched on their normalized path: a rule path that normalization changes
/// could never match, and used to load silently.
#[test]
fn a_match_path_that_no_normalized_request_can_have_is_refused() {
    let rule = "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\n";
    for (path, says) in [
        ("/a//b", "where it is `/a/b`; write that"),
        ("/api/./v1/*", "where it is `/api/v1/*`; write that"),
        ("/%6Cogin", "where it is `/login`"),
        ("/a%2Fb", "can never match: an encoded `/` (`%2F`)"),
        ("login", "can never match: a path must start with `/`"),
    ] {
        let e = errors(&format!("{rule}[limit.match]\npath = \"{path}\""));
        assert!(e.contains("test.toml:1:1: limit `k`: `match.path"), "{e}");
        assert!(e.contains(says), "{path}: {e}");
    }
    for fine in ["/a/b", "/api/*", "*", "/"] {
        let text = format!("[[limit]]\n{rule}[limit.match]\npath = \"{fine}\"\n");
        assert!(parse("test.toml", &text).is_ok(), "{fine}");
    }
    let critical = "[server]\ncritical = [{ path = \"/pay//now\" }]\n";
    let e = parse("test.toml", critical).unwrap_err().to_string();
    assert!(
        e.contains("`[server] critical`: `match.path = \"/pay//now\"`"),
        "{e}"
    );
}

/// A field that the rest of its table makes meaningless was accepted and ignored, so the
/// file did something other than it said: a `header_value` without its `header` matched
/// every request, `mode = "shadow"` beside a `rollout` enforced, `listen = "off"` listened.
#[test]
fn a_field_its_table_would_ignore_is_refused_where_it_stands() {
    let gcra = "name = \"k\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\n";
    let cases: &[(String, &str)] = &[
        (
            format!("{gcra}match = {{ header_value = \"free\" }}"),
            "test.toml:7:26: limit `k`: `match.header_value` needs `match.header`, the header whose value it is",
        ),
        (
            format!("{gcra}local_divide_by = 4"),
            "test.toml:7:19: limit `k`: `local_divide_by` applies only to `on_store_failure = \"local\"`",
        ),
        (
            format!("{gcra}on_store_failure = \"closed\"\nlocal_divide_by = 4"),
            "test.toml:8:19: limit `k`: `local_divide_by` applies only to `on_store_failure = \"local\"`",
        ),
        (
            format!("{gcra}max_cost = 10"),
            "test.toml:7:12: limit `k`: `max_cost` applies only to a cost read from the request (`cost = \"header:NAME\"` or an estimate from its body)",
        ),
        (
            format!("{gcra}mode = \"shadow\"\nrollout = \"10%\""),
            "test.toml:8:11: limit `k`: `mode` and `rollout` are both given",
        ),
    ];
    for (body, want) in cases {
        let got = errors(body);
        assert!(
            got.contains(want),
            "for:\n{body}\nwanted: {want}\ngot:    {got}"
        );
    }
    let wrong = |text: &str| parse("s.toml", text).unwrap_err().to_string();
    assert_eq!(
        wrong("[server]\nlisten = \"off\"\n"),
        "s.toml:2:10: `[server]`: `listen` cannot be \"off\": it is the main listener (the gateway or the decision API)"
    );
    assert_eq!(
        wrong("[server]\ncritical = [{ path = \"/pay*\", header_value = \"1\" }]\n"),
        "s.toml:2:46: `[server] critical`: `header_value` needs `header`, the header whose value it is"
    );
    // Each still takes what it applies to.
    let fine = format!(
        "[[limit]]\n{gcra}match = {{ header = \"x-plan\", header_value = \"free\" }}\non_store_failure = \"local\"\nlocal_divide_by = 4\nrollout = \"10%\"\n"
    );
    parse("ok.toml", &fine).unwrap();
}

/// The same for the store's connection fields, a route's Envoy fields and a prefix on a rule
/// keyed on no address: each was accepted and did nothing.
#[test]
fn store_fields_routes_and_prefixes_that_would_do_nothing_are_refused() {
    let wrong = |text: &str| parse("s.toml", text).unwrap_err().to_string();
    assert_eq!(
        wrong("[store]\nurl = \"redis://10.0.0.1:6379\"\n"),
        "s.toml:2:7: `[store]`: `url` applies only to `kind = \"redis\"` (the store is `memory`)"
    );
    assert_eq!(
        wrong("[store]\nkind = \"redis-cluster\"\nnodes = [\"redis://a:1\"]\nurl = \"redis://b:1\"\n"),
        "s.toml:4:7: `[store]`: `url` applies only to `kind = \"redis\"` (the store is `redis-cluster`)"
    );
    assert_eq!(
        wrong("[store]\nkind = \"redis\"\nurl = \"redis://b:1\"\nnodes = [\"redis://a:1\"]\n"),
        "s.toml:4:9: `[store]`: `nodes` applies only to `kind = \"redis-cluster\"` (the store is `redis`)"
    );
    assert_eq!(
        wrong("[store]\ntls_ca_file = \"/etc/ca.pem\"\n"),
        "s.toml:2:15: `[store]`: `tls_ca_file` applies only to a Redis store (the store is `memory`)"
    );
    assert_eq!(
        wrong("[server]\ncritical = [{ domain = \"mesh\" }]\n"),
        "s.toml:2:13: `[server] critical`: `domain`, `descriptor` and `bucket` are for Envoy descriptors and quota buckets; a route matches HTTP requests"
    );
    let gcra = "[[limit]]\nname = \"k\"\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\n";
    assert_eq!(
        wrong(&format!("{gcra}key = [\"api_key\"]\nipv6_prefix = 48\n")),
        "s.toml:7:15: limit `k`: `ipv6_prefix` applies only to a rule keyed on `ip`"
    );
    parse(
        "ok.toml",
        &format!("{gcra}key = [\"ip\"]\nipv4_prefix = 24\nipv6_prefix = 48\n"),
    )
    .unwrap();
    parse(
        "ok.toml",
        "[store]\nkind = \"redis\"\nurl = \"rediss://r:6380\"\ntls_ca_file = \"/etc/ca.pem\"\n",
    )
    .unwrap();
}

#[test]
fn when_key_missing_and_match_host_are_validated_where_written() {
    let rule = |extra: &str| {
        format!(
            "[[limit]]\nname = \"r\"\n{extra}\nkey = [\"api_key\"]\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1\n"
        )
    };
    let errors = parse("t.toml", &rule("when_key_missing = \"drop\"")).unwrap_err();
    assert_eq!(
        errors.to_string(),
        "t.toml:3:20: limit `r`: `when_key_missing` is `client`, `skip` or `refuse`, not `drop`"
    );
    for (given, expected) in [("skip", "skip"), ("refuse", "refuse"), ("client", "client")] {
        let config = parse("t.toml", &rule(&format!("when_key_missing = \"{given}\""))).unwrap();
        assert_eq!(config.rules[0].when_key_missing.to_string(), expected);
    }
    let config = parse("t.toml", &rule("")).unwrap();
    assert_eq!(
        config.rules[0].when_key_missing.to_string(),
        "client",
        "the default"
    );
    let errors = parse(
        "t.toml",
        &rule("match = { host = \"api.example.com:443\" }"),
    )
    .unwrap_err();
    assert!(errors.to_string().contains("names a port"), "{errors}");
    let errors = parse("t.toml", &rule("match = { host = \"api..example.com\" }")).unwrap_err();
    assert!(errors.to_string().contains("is not a host"), "{errors}");
    let errors = parse(
        "t.toml",
        "[[limit]]\nname = \"d\"\nmatch = { domain = \"edge\" }\nkey = [\"descriptor\"]\nwhen_key_missing = \"client\"\nalgorithm = \"gcra\"\nrate = \"1/s\"\nburst = 1\n",
    )
    .unwrap_err();
    assert!(errors.to_string().contains("Envoy"), "{errors}");
}

#[test]
fn a_sliding_log_that_cannot_fit_the_store_is_refused_where_its_limit_is() {
    let log = |limit: u64, max_bytes: u64| {
        format!(
            "[store]\nmax_bytes = {max_bytes}\n\n[[limit]]\nname = \"otp\"\nkey = [\"ip\"]\nalgorithm = \"sliding-log\"\nlimit = {limit}\nwindow = \"1h\"\n"
        )
    };
    // 64 KiB over 64 shards is 1 KiB a shard: 5 million entries of 16 bytes do not fit.
    let message = parse("test.toml", &log(5_000_000, 65_536))
        .expect_err("a log larger than its shard")
        .to_string();
    assert!(
        message.starts_with("test.toml:8:9: limit `otp`: "),
        "{message}"
    );
    for part in [
        "sliding log of `limit` 5000000",
        "`[store] max_bytes` (65536)",
        "1024 bytes each",
        "sliding-window",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    // With Redis too: the in-process store of the fallback and guards has the same bound.
    let redis = |limit| {
        log(limit, 65_536).replace(
            "[store]\n",
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n",
        )
    };
    assert!(parse("test.toml", &redis(5_000_000)).is_err());
    assert!(parse("test.toml", &redis(10)).is_ok(), "a small log fits");
    // 50 entries fit with the slot; so does the big log under the default 256 MiB.
    assert!(parse("test.toml", &log(50, 65_536)).is_ok());
    assert!(parse("test.toml", &log(5_000, 65_536)).is_err());
    assert!(parse("test.toml", &log(100_000, 256 << 20)).is_ok());
}

#[test]
fn the_envoy_section_is_validated_where_each_field_is() {
    let message = parse(
        "test.toml",
        "[envoy]\nmax_descriptors = 0\nmax_entries = -3\nclients = [\"10.0.0.0/8\", \"nope\"]\nmax_message_bytes = 1024\nmax_quota_buckets = 0\n",
    )
    .expect_err("zero, negative and an unreadable client")
    .to_string();
    for part in [
        "test.toml:2:19: `[envoy]`: `max_descriptors` must be a whole number above zero, not 0",
        "test.toml:3:15: `[envoy]`: `max_entries` must be a whole number above zero, not -3",
        "test.toml:4:26: `[envoy]`: `clients`: `nope`",
        "test.toml:6:21: `[envoy]`: `max_quota_buckets` must be a whole number above zero, not 0",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    let config = parse(
        "test.toml",
        "[envoy]\nmax_descriptors = 8\nclients = [\"127.0.0.1/32\"]\n",
    )
    .unwrap();
    assert_eq!(config.server.envoy.max_descriptors, 8);
    assert_eq!(config.server.envoy.max_entries, 16, "defaulted");
    assert_eq!(config.server.envoy.max_quota_buckets, 10_000, "defaulted");
    assert!(config
        .server
        .envoy
        .admits(&config.trusted_proxies, Some("127.0.0.1".parse().unwrap())));
    let unknown = parse("test.toml", "[envoy]\nmax_descriptor = 8\n")
        .expect_err("a misspelled field")
        .to_string();
    assert!(
        unknown.contains("did you mean `max_descriptors`?"),
        "{unknown}"
    );
}

/// `match.bucket`, the `bucket` key part and `weights`: each mistake refused where it is
/// written, with the rule's name.
#[test]
fn bucket_rules_are_validated_where_each_field_is() {
    // Line 2 on: the rule's name, its numbers, then the case's lines from line 6.
    let rule = |rest: &str| {
        format!("name = \"b\"\nalgorithm = \"gcra\"\nrate = \"600/s\"\nburst = 60\n{rest}")
    };
    let cases: &[(String, &str)] = &[
        (
            rule("match = { bucket = \"name=api\" }\nkey = [\"bucket\"]"),
            "test.toml:6:20: limit `b`: `match.bucket` needs `match.domain`: quota buckets come over Envoy's quota service, for a domain",
        ),
        (
            rule("match = { domain = \"edge\", descriptor = \"name\", bucket = \"name=api\" }\nkey = [\"global\"]"),
            "test.toml:6:58: limit `b`: `match.bucket` and `match.descriptor` are both given",
        ),
        (
            rule("match = { domain = \"edge\", bucket = \" \" }\nkey = [\"global\"]"),
            "test.toml:6:37: limit `b`: `match.bucket` lists no entries: write `key=value` or a bare `key` (any value), comma-separated",
        ),
        (
            rule("match = { domain = \"edge\", bucket = \"name=api,=gold\" }\nkey = [\"global\"]"),
            "test.toml:6:37: limit `b`: `match.bucket` entry 2 (`=gold`) has no key: each entry is `key=value` or a bare `key`",
        ),
        (
            rule("match = { domain = \"edge\", bucket = \"name=api,,tier\" }\nkey = [\"global\"]"),
            "test.toml:6:37: limit `b`: `match.bucket` entry 2 (``) has no key",
        ),
        (
            rule("match = { domain = \"edge\", bucket = \"tier=gold,tier=free\" }\nkey = [\"global\"]"),
            "test.toml:6:37: limit `b`: `match.bucket` names `tier` twice: a bucket id holds one value per key, so no bucket could match",
        ),
        (
            rule("match = { domain = \"edge\", descriptor = \"name\" }\nkey = [\"descriptor\", \"bucket\"]"),
            "test.toml:7:22: limit `b`: the `bucket` key part needs `match.bucket`: only Envoy quota buckets carry one",
        ),
        (
            rule("key = [\"ip\"]\nweights = { \"tier=gold\" = 3 }"),
            "test.toml:7:11: limit `b`: `weights` applies only to a rule with `match.bucket`",
        ),
        (
            rule("match = { domain = \"edge\", bucket = \"name=api\" }\nkey = [\"global\"]\nweights = { \"tier=gold\" = 0 }"),
            "test.toml:8:27: limit `b`: the weight of `tier=gold` in `weights` must be a whole number above zero, not 0",
        ),
        (
            rule("match = { domain = \"edge\", bucket = \"name=api\" }\nkey = [\"global\"]\nweights = { \"tier=gold\" = 1001 }"),
            "test.toml:8:27: limit `b`: the weight of `tier=gold` in `weights` is at most 1000, not 1001",
        ),
        (
            rule("match = { domain = \"edge\", bucket = \"name=api\" }\nkey = [\"global\"]\nweights = { gold = 3 }"),
            "test.toml:8:20: limit `b`: `weights` entry `gold` is no `key=value`: a bucket weighs this much when its id holds that entry, value matched exactly (no `*` glob)",
        ),
        (
            "name = \"b\"\nalgorithm = \"sliding-log\"\nlimit = 5\nwindow = \"1s\"\nmatch = { domain = \"edge\", bucket = \"name=api\" }\nkey = [\"global\"]".to_owned(),
            "test.toml:6:37: limit `b`: `match.bucket` needs an algorithm with a rate to split among the Envoys (gcra, token-bucket, leaky-bucket, fixed-window or sliding-window), not `sliding-log`",
        ),
    ];
    for (body, want) in cases {
        let got = errors(body);
        assert!(
            got.contains(want),
            "for:\n{body}\nwanted: {want}\ngot:    {got}"
        );
    }
    // Routes match HTTP requests: no bucket there either.
    let route = parse(
        "s.toml",
        "[server]\ncritical = [{ bucket = \"name=api\" }]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        route.contains(
            "s.toml:2:13: `[server] critical`: `domain`, `descriptor` and `bucket` are for Envoy"
        ),
        "{route}"
    );

    // What is right is taken as written: entries trimmed, weights by entry.
    let config = parse(
        "ok.toml",
        &format!(
            "[[limit]]\n{}",
            rule("match = { domain = \"edge\", bucket = \" name = api , tier \" }\nkey = [\"bucket\"]\nweights = { \"tier=gold\" = 3, \"tier = silver\" = 2 }\n")
        ),
    )
    .unwrap();
    let bucket = config.rules[0]
        .matches
        .bucket
        .as_ref()
        .expect("a bucket match");
    assert_eq!(
        bucket.entries,
        [
            ("name".to_owned(), Some("api".to_owned())),
            ("tier".to_owned(), None)
        ]
    );
    assert_eq!(
        bucket.weights,
        [
            ("tier".to_owned(), "gold".to_owned(), 3),
            ("tier".to_owned(), "silver".to_owned(), 2)
        ]
    );
    assert_eq!(config.rules[0].key, [KeyPart::Bucket]);
}

/// `settle_from` is read where it is written: a header or a usage path, on a rule whose
/// answer the gateway relays; with it, `settle` defaults to ten minutes.
#[test]
fn settle_from_is_a_header_or_a_usage_path_and_brings_its_settle() {
    let rule = "name = \"t\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 100\nwindow = \"1m\"\n";
    for (line, want) in [
        (
            "settle_from = \"usage..total\"",
            "test.toml:7:15: limit `t`: `settle_from`: `usage..total` is not a usage path (an empty key)",
        ),
        (
            "settle_from = \"header:\"",
            "test.toml:7:15: limit `t`: `settle_from`: `` is not a header name",
        ),
        (
            "settle_from = \"header:bad header\"",
            "`settle_from`: `bad header` is not a header name",
        ),
        (
            "settle_from = \"usage.total_tokens\"\nmatch = { domain = \"edge\" }",
            "`settle_from` does not apply here: a rule of an Envoy `match.domain` sees no answer",
        ),
    ] {
        let got = errors(&format!("{rule}{line}"));
        assert!(got.contains(want), "for {line}\nwanted: {want}\ngot:    {got}");
    }
    let parsed = |extra: &str| {
        parse("t.toml", &format!("[[limit]]\n{rule}{extra}"))
            .unwrap()
            .rules
            .remove(0)
    };
    let read = parsed("settle_from = \"usage.prompt_tokens + usage.completion_tokens\"");
    assert_eq!(
        read.settle_from.map(|f| f.to_string()).as_deref(),
        Some("usage.prompt_tokens + usage.completion_tokens")
    );
    assert_eq!(
        read.settle_within,
        Some(ratewarden_policy::config::SETTLE_FROM_WITHIN)
    );
    let header = parsed("settle_from = \"header:X-Tokens-Used\"\nsettle = \"30s\"");
    assert_eq!(
        header.settle_from.map(|f| f.to_string()).as_deref(),
        Some("header:x-tokens-used")
    );
    assert_eq!(
        header.settle_within,
        Some(std::time::Duration::from_secs(30))
    );
}

/// An estimate from the body: `json:PATH`, `bytes/N` and numbers added up, with a
/// `max_cost`, and something in it read from the body.
#[test]
fn a_cost_estimated_from_the_body_is_validated_where_written() {
    let rule = "name = \"t\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 100\nwindow = \"1m\"\n";
    for (line, want) in [
        (
            "cost = \"json:max_tokens\"",
            "test.toml:7:8: limit `t`: an estimate read from the body needs `max_cost`",
        ),
        (
            "cost = \"json:max_tokens + bytes/0\"\nmax_cost = 10",
            "`bytes/0` divides by a whole number above 0",
        ),
        (
            "cost = \"5 + 6\"\nmax_cost = 10",
            "nothing in it is read from the body",
        ),
        ("cost = \"json:usage..x\"\nmax_cost = 10", "an empty key"),
    ] {
        let got = errors(&format!("{rule}{line}"));
        assert!(
            got.contains(want),
            "for {line}\nwanted: {want}\ngot:    {got}"
        );
    }
    let rules = parse(
        "t.toml",
        &format!("[[limit]]\n{rule}cost = \"json:max_tokens + bytes/4 + 10\"\nmax_cost = 500\n"),
    )
    .unwrap()
    .rules;
    match &rules[0].cost {
        ratewarden_policy::Cost::Body { terms, max } => {
            let shown: Vec<String> = terms.iter().map(ToString::to_string).collect();
            assert_eq!(shown, ["json:max_tokens", "bytes/4", "10"]);
            assert_eq!(*max, 500);
        }
        other => panic!("{other:?}"),
    }
}

/// `json:PATH` keys on one field of the body; a sum names no one value and is refused.
#[test]
fn a_key_part_from_the_json_body_is_one_field() {
    let rule = |part: &str| {
        format!("name = \"t\"\nkey = [\"{part}\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"\n")
    };
    let parsed = parse("t.toml", &format!("[[limit]]\n{}", rule("json:model")))
        .unwrap()
        .rules
        .remove(0);
    assert_eq!(parsed.key[0].to_string(), "json:model");
    assert!(parsed.reads_body());
    for bad in ["json:a + b", "json:", "json:a..b"] {
        let got = errors(&rule(bad));
        assert!(got.contains("unknown key part"), "{bad}: {got}");
    }
}

/// `always_charge` is for units that are spent: refused where they are held or queued.
#[test]
fn always_charge_is_refused_where_units_are_held() {
    let got = errors("name = \"c\"\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 4\nalways_charge = true");
    assert!(
        got.contains("limit `c`: `always_charge` does not apply to `concurrency`"),
        "{got}"
    );
    let rules = parse(
        "t.toml",
        "[[limit]]\nname = \"t\"\nkey = [\"ip\"]\nalgorithm = \"fixed-window\"\nlimit = 1\nwindow = \"1m\"\nalways_charge = true\n",
    )
    .unwrap()
    .rules;
    assert!(rules[0].always_charge);
}

/// `[regions]` and `scope = "global"`: the home store parsed as `[store]` is, and every
/// misuse refused where it is written.
#[test]
fn regions_and_global_rules_are_validated_where_written() {
    let home = "[regions]\nname = \"eu\"\nhorizon = \"2s\"\n[regions.home]\nkind = \"redis\"\nurl = \"redis://home:6379\"\ndeadline = \"300ms\"\n";
    let rule = |extra: &str| {
        format!("[[limit]]\nname = \"g\"\nkey = [\"api_key\"]\nalgorithm = \"fixed-window\"\nlimit = 10\nwindow = \"1m\"\n{extra}\n")
    };
    let config = parse("r.toml", &format!("{home}{}", rule("scope = \"global\""))).unwrap();
    let regions = config.regions.as_ref().expect("regions");
    assert_eq!(regions.name, "eu");
    assert_eq!(regions.horizon, Duration::from_secs(2));
    assert_eq!(regions.home.deadline, Duration::from_millis(300));
    assert!(config.rules[0].global);
    assert_eq!(config.rules[0].prefetch, Some(Duration::from_secs(2)));
    // A rule's own `prefetch` is its horizon; `scope = "region"` is the default.
    let config = parse(
        "r.toml",
        &format!("{home}{}", rule("scope = \"global\"\nprefetch = \"300ms\"")),
    )
    .unwrap();
    assert_eq!(config.rules[0].prefetch, Some(Duration::from_millis(300)));
    let config = parse("r.toml", &format!("{home}{}", rule("scope = \"region\""))).unwrap();
    assert!(!config.rules[0].global);
    assert_eq!(config.rules[0].prefetch, None);

    let refused = |text: &str| refused("r.toml", text);
    let e = refused(&rule("scope = \"global\""));
    assert!(
        e.starts_with("r.toml:7:9: limit `g`: `scope = \"global\"` needs a `[regions]` section"),
        "{e}"
    );
    let e = refused(&format!("{home}{}", rule("scope = \"everywhere\"")));
    assert!(e.contains(":14:9: limit `g`: `scope` is `region`"), "{e}");
    let e = refused(&format!(
        "{home}{}",
        rule("scope = \"global\"\nsettle = \"1m\"")
    ));
    assert!(
        e.contains("`scope = \"global\"` and `settle` are both given"),
        "{e}"
    );
    let e = refused(&format!(
        "{home}[[limit]]\nname = \"c\"\nkey = [\"ip\"]\nalgorithm = \"concurrency\"\nlimit = 3\nscope = \"global\"\n"
    ));
    assert!(e.contains("does not apply to `concurrency`"), "{e}");
    let e = refused("[regions]\nname = \"eu\"\n[regions.home]\nkind = \"memory\"\n");
    assert!(
        e.starts_with("r.toml:3:1: `[regions.home]`: the home store is shared"),
        "{e}"
    );
    let e = refused("[regions]\nname = \"eu\"\n[regions.home]\nkind = \"redis\"\n");
    assert!(
        e.contains("`[regions.home]`: `kind = \"redis\"` needs `url`"),
        "{e}"
    );
    let e = refused("[regions]\n[regions.home]\nkind = \"redis\"\nurl = \"redis://h\"\n");
    assert!(e.contains("`[regions]` needs `name`"), "{e}");
    let e = refused("[regions]\nname = \"eu\"\n");
    assert!(
        e.contains("`[regions]` needs a `[regions.home]` table"),
        "{e}"
    );
}

#[test]
fn how_redis_calls_are_coalesced_is_configured_per_store_and_checked_where_written() {
    // The defaults: `[store]` keeps one call in flight, the home store (a WAN away) eight.
    let config = parse(
        "b.toml",
        "[store]\nkind = \"redis\"\nurl = \"redis://r:6379\"\n[regions]\nname = \"eu\"\n[regions.home]\nkind = \"redis\"\nurl = \"redis://home:6379\"\n",
    )
    .unwrap();
    assert_eq!(
        (
            config.store.batch_calls,
            config.store.batch_bytes,
            config.store.batch_in_flight
        ),
        (128, 65_536, 1)
    );
    let home = &config.regions.as_ref().unwrap().home;
    assert_eq!((home.batch_calls, home.batch_in_flight), (128, 8));
    // Given, each is what it says, in either section.
    let config = parse(
        "b.toml",
        "[store]\nkind = \"redis-cluster\"\nnodes = [\"redis://a:7000\"]\nbatch_calls = 1\nbatch_bytes = 4096\nbatch_in_flight = 2\n[regions]\nname = \"eu\"\n[regions.home]\nkind = \"redis\"\nurl = \"redis://home:6379\"\nbatch_in_flight = 3\n",
    )
    .unwrap();
    assert_eq!(
        (
            config.store.batch_calls,
            config.store.batch_bytes,
            config.store.batch_in_flight
        ),
        (1, 4096, 2)
    );
    assert_eq!(config.regions.unwrap().home.batch_in_flight, 3);

    let refused = |text: &str| refused("b.toml", text);
    let redis = "[store]\nkind = \"redis\"\nurl = \"redis://r:6379\"\n";
    let e = refused(&format!("{redis}batch_in_flight = 0\n"));
    assert!(
        e.starts_with(
            "b.toml:4:19: `[store]`: `batch_in_flight` must be a whole number above zero"
        ),
        "{e}"
    );
    let e = refused(&format!("{redis}batch_bytes = 0\n"));
    assert!(
        e.starts_with("b.toml:4:15: `[store]`: `batch_bytes` must be a whole number above zero"),
        "{e}"
    );
    let e = refused(&format!("{redis}batch_calls = -1\n"));
    assert!(e.contains("b.toml:4:15: `[store]`: `batch_calls`"), "{e}");
    let e = refused("[store]\nbatch_calls = 16\n");
    assert!(
        e.starts_with("b.toml:2:15: `[store]`: `batch_calls` applies only to a Redis store"),
        "{e}"
    );
    let e = refused(
        "[regions]\nname = \"eu\"\n[regions.home]\nkind = \"redis\"\nurl = \"redis://h\"\nbatch_in_flight = 0\n",
    );
    assert!(
        e.contains(
            "b.toml:6:19: `[regions.home]`: `batch_in_flight` must be a whole number above zero"
        ),
        "{e}"
    );
}
