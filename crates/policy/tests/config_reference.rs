//! `docs/configuration.md` names every field the config parser takes, each under the heading
//! of its section.
//!
//! The fields are the parser's own: each section is fed an unknown field and serde's
//! "unknown field `…`, expected one of `a`, `b`, …" lists every field it knows. Sections are
//! found the same way, by probing each field as a table (and as an array of tables), so a new
//! field, or a new section such as `[envoy]`, fails this test until the page documents it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use ratewarden_policy::config::parse;

/// A field no section has, nor anything close to a real name (which would add a hint).
const PROBE: &str = "zz_probe_field";

/// Where the reference lives, from this crate.
fn reference() -> (String, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let shown = "docs/configuration.md".to_owned();
    match std::fs::read_to_string(&path) {
        Ok(text) => (shown, text),
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    }
}

/// A section of the file: its path of field names and the header written for it, such as
/// `[limit.adaptive]` (empty for the top level).
#[derive(Debug, Clone)]
struct Section {
    path: Vec<String>,
    header: String,
    fields: Vec<String>,
}

impl Section {
    /// How the page's heading names it.
    fn heading_name(&self) -> String {
        if self.path.is_empty() {
            "the top level".to_owned()
        } else {
            format!("`{}`", self.header)
        }
    }
}

/// The fields serde lists after `expected` in an unknown-field message, if it is one about
/// [`PROBE`].
fn expected_fields(message: &str) -> Option<Vec<String>> {
    let rest = message.strip_prefix(&format!("unknown field `{PROBE}`"))?;
    // `parse` may add "; did you mean `x`?", which names no new field.
    let rest = rest.split("; did you mean").next().unwrap_or(rest);
    let fields: Vec<String> = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    Some(fields)
}

/// The section at `path`, when some way of writing it (each part a table or an array of
/// tables) makes the parser list its fields.
fn probe(path: &[String]) -> Option<Section> {
    let shapes = 1usize << path.len();
    for shape in 0..shapes {
        let is_array = |i: usize| shape & (1 << i) != 0;
        let mut text = String::new();
        let mut header = String::new();
        for i in 0..path.len() {
            let dotted = path[..=i].join(".");
            let last = i + 1 == path.len();
            if is_array(i) {
                header = format!("[[{dotted}]]");
                text.push_str(&format!("{header}\n"));
            } else if last {
                header = format!("[{dotted}]");
                text.push_str(&format!("{header}\n"));
            }
        }
        text.push_str(&format!("{PROBE} = 1\n"));
        let Err(errors) = parse("probe.toml", &text) else {
            continue;
        };
        if let Some(fields) = errors.0.first().and_then(|e| expected_fields(&e.message)) {
            return Some(Section {
                path: path.to_vec(),
                header,
                fields,
            });
        }
    }
    None
}

/// Every section the parser takes, the top level first, each before its own tables.
fn sections() -> Vec<Section> {
    let mut found = Vec::new();
    let mut pending = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let Some(section) = probe(&path) else {
            continue;
        };
        for field in section.fields.iter().rev() {
            let mut inner = path.clone();
            inner.push(field.clone());
            pending.push(inner);
        }
        found.push(section);
    }
    found
}

/// The lines under the first heading naming `name` (in any case), down to the next heading of its level
/// or above, or the next naming a section (`[…`).
fn body<'a>(page: &'a str, name: &str) -> Option<Vec<&'a str>> {
    let lines: Vec<&str> = page.lines().collect();
    let level = |line: &str| line.bytes().take_while(|b| *b == b'#').count();
    let start = lines
        .iter()
        .position(|l| level(l) > 0 && l.to_lowercase().contains(&name.to_lowercase()))?;
    let depth = level(lines[start]);
    let end = lines[start + 1..]
        .iter()
        .position(|l| (1..=depth).contains(&level(l)) || (level(l) > 0 && l.contains("`[")))
        .map_or(lines.len(), |n| start + 1 + n);
    Some(lines[start + 1..end].to_vec())
}

/// The field a table row documents: its first cell, when that is one backticked name.
fn row_field(line: &str) -> Option<&str> {
    let cell = line.strip_prefix('|')?.split('|').next()?.trim();
    let name = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!name.is_empty() && !name.contains('`')).then_some(name)
}

#[test]
fn the_probe_finds_the_sections_it_must() {
    let headers: BTreeSet<String> = sections().into_iter().map(|s| s.header).collect();
    for must in [
        "",
        "[server]",
        "[store]",
        "[keys]",
        "[[limit]]",
        "[limit.match]",
        "[limit.adaptive]",
        "[limit.queue]",
        "[[server.critical]]",
    ] {
        assert!(
            headers.contains(must),
            "the probe did not find `{must}`: {headers:?}"
        );
    }
    let limit = sections()
        .into_iter()
        .find(|s| s.header == "[[limit]]")
        .unwrap();
    for field in ["name", "key", "algorithm", "rollout", "settle", "queue"] {
        assert!(limit.fields.iter().any(|f| f == field), "{limit:?}");
    }
}

#[test]
fn every_field_the_parser_takes_is_in_the_reference() {
    let (file, page) = reference();
    let mut missing = Vec::new();
    for section in sections() {
        let name = section.heading_name();
        let Some(lines) = body(&page, &name) else {
            missing.push(format!(
                "{file}: no heading names {name} (fields: {}); add a `##` heading naming {name} with a row `| `field` | type | default | reload | what it does |` for each field",
                section.fields.join(", ")
            ));
            continue;
        };
        let rows: BTreeSet<&str> = lines.iter().filter_map(|l| row_field(l)).collect();
        for field in &section.fields {
            if !rows.contains(field.as_str()) {
                missing.push(format!(
                    "{file}: {} field `{field}` is not documented: add a row `| `{field}` | type | default | reload | what it does |` under the heading naming {name}",
                    if section.path.is_empty() { "top-level".to_owned() } else { format!("`{}`", section.header) },
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the configuration reference is missing what the parser takes:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_field_the_reference_names_is_one_the_parser_takes() {
    let (file, page) = reference();
    let mut stale = Vec::new();
    for section in sections() {
        let name = section.heading_name();
        let Some(lines) = body(&page, &name) else {
            continue;
        };
        // Only the field table (headed `| field |`); other tables list values, not fields.
        let mut in_fields = false;
        for line in lines {
            if line.starts_with("| field |") {
                in_fields = true;
            } else if !line.starts_with('|') {
                in_fields = false;
            } else if let Some(field) = row_field(line).filter(|_| in_fields) {
                if !section.fields.iter().any(|f| f == field) {
                    stale.push(format!(
                        "{file}: the heading naming {name} documents `{field}`, which the parser does not take (it takes {})",
                        section.fields.join(", ")
                    ));
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the configuration reference names fields that do not exist:\n{}",
        stale.join("\n")
    );
}

/// A field's `reload` cell (the fourth) in its section's field table.
fn reload_cells(page: &str, heading: &str) -> Vec<(String, String)> {
    let mut cells = Vec::new();
    let mut in_fields = false;
    for line in body(page, heading).unwrap_or_default() {
        if line.starts_with("| field |") {
            in_fields = true;
        } else if !line.starts_with('|') {
            in_fields = false;
        } else if let Some(field) = row_field(line).filter(|_| in_fields) {
            let reload = line.split('|').nth(4).unwrap_or("").trim().to_owned();
            cells.push((field.to_owned(), reload));
        }
    }
    cells
}

#[test]
fn every_field_row_says_what_a_reload_does() {
    let (file, page) = reference();
    let mut wrong = Vec::new();
    for section in sections() {
        let name = section.heading_name();
        for (field, reload) in reload_cells(&page, &name) {
            if !["hot", "restart", "per field"]
                .iter()
                .any(|r| reload.starts_with(r))
            {
                wrong.push(format!(
                    "{file}: {name} `{field}`: the reload column says `{reload}`; it starts with `hot` or `restart`"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A reload applies `[server]` and `[store]` fields as the page says: each sample changes
/// one field from its default, and `needing_restart` (what a reload names and leaves for a
/// restart) must be non-empty exactly when the page says `restart`. Fields without a
/// sample here (the token file reads a file) are not checked.
#[test]
fn the_reload_column_matches_what_a_reload_leaves_for_a_restart() {
    let (file, page) = reference();
    let server = [
        ("listen", "listen = \"127.0.0.1:1\""),
        ("api", "api = \"127.0.0.1:2\""),
        ("grpc", "grpc = \"127.0.0.1:3\""),
        ("admin", "admin = \"127.0.0.1:4\""),
        ("admin_insecure", "admin_insecure = true"),
        ("admin_hosts", "admin_hosts = [\"admin.internal\"]"),
        ("upstream", "upstream = \"http://127.0.0.1:5\""),
        ("trusted_proxies", "trusted_proxies = [\"10.0.0.0/8\"]"),
        ("client_ip_header", "client_ip_header = \"X-Real-IP\""),
        ("legacy_headers", "legacy_headers = true"),
        ("retry_after_jitter", "retry_after_jitter = \"1s\""),
        ("max_in_flight", "max_in_flight = 5000"),
        ("queue_timeout", "queue_timeout = \"1s\""),
        ("critical_reserve", "critical_reserve = 5"),
        ("critical", "critical = [{ path = \"/a\" }]"),
        ("sheddable", "sheddable = [{ path = \"/b\" }]"),
        ("shutdown_grace", "shutdown_grace = \"1s\""),
        ("max_body", "max_body = 100"),
        ("method_override", "method_override = \"decide\""),
        ("method_override_scan", "method_override_scan = 100"),
        ("header_read_timeout", "header_read_timeout = \"1s\""),
        ("idle_timeout", "idle_timeout = \"1s\""),
        ("send_timeout", "send_timeout = \"1s\""),
        ("max_header_bytes", "max_header_bytes = 10_000"),
        ("api_body_timeout", "api_body_timeout = \"1s\""),
        ("body_idle_timeout", "body_idle_timeout = \"1s\""),
        ("body_min_rate", "body_min_rate = 5"),
        ("body_rate_grace", "body_rate_grace = \"1s\""),
        (
            "upstream_connect_timeout",
            "upstream_connect_timeout = \"1s\"",
        ),
        (
            "upstream_response_timeout",
            "upstream_response_timeout = \"1s\"",
        ),
        ("upstream_idle_timeout", "upstream_idle_timeout = \"1s\""),
        ("upstream_pool_idle", "upstream_pool_idle = \"1s\""),
        (
            "max_connections_per_client",
            "max_connections_per_client = 5",
        ),
    ];
    let store = [
        ("kind", "kind = \"redis\"\nurl = \"redis://127.0.0.1:1\""),
        ("max_keys", "max_keys = 5"),
        ("max_bytes", "max_bytes = 100_000"),
        ("when_full", "when_full = \"reject\""),
        ("deadline", "deadline = \"1s\""),
        ("breaker_failures", "breaker_failures = 1"),
        ("breaker_cool_down", "breaker_cool_down = \"5s\""),
        ("key_prefix", "key_prefix = \"other:\""),
    ];
    // Fields of a Redis store, each changed from a Redis store's file.
    let redis = "kind = \"redis\"\nurl = \"rediss://127.0.0.1:1\"";
    let on_redis = [
        ("url", "kind = \"redis\"\nurl = \"rediss://127.0.0.1:2\""),
        (
            "tls_ca_file",
            "kind = \"redis\"\nurl = \"rediss://127.0.0.1:1\"\ntls_ca_file = \"/etc/ca.pem\"",
        ),
        (
            "wait_for_replicas",
            "kind = \"redis\"\nurl = \"rediss://127.0.0.1:1\"\nwait_for_replicas = 1",
        ),
        ("batch_calls", &format!("{redis}\nbatch_calls = 1")),
        ("batch_bytes", &format!("{redis}\nbatch_bytes = 1024")),
        ("batch_in_flight", &format!("{redis}\nbatch_in_flight = 2")),
    ];
    // Fields of a Sentinel store, each changed from a Sentinel store's file.
    let sentinel =
        "kind = \"redis-sentinel\"\nsentinels = [\"redis://127.0.0.1:1\"]\nmaster_name = \"m\"";
    let on_sentinel = [
        (
            "sentinels",
            "kind = \"redis-sentinel\"\nsentinels = [\"redis://127.0.0.1:2\"]\nmaster_name = \"m\"",
        ),
        (
            "master_name",
            "kind = \"redis-sentinel\"\nsentinels = [\"redis://127.0.0.1:1\"]\nmaster_name = \"n\"",
        ),
        (
            "master_username",
            &format!("{sentinel}\nmaster_username = \"app\""),
        ),
        (
            "master_password",
            &format!("{sentinel}\nmaster_password = \"pw\""),
        ),
        ("master_tls", &format!("{sentinel}\nmaster_tls = true")),
    ];
    let mut wrong = Vec::new();
    for (header, base, samples) in [
        ("[server]", "", &server[..]),
        ("[store]", "", &store[..]),
        ("[store]", redis, &on_redis[..]),
        ("[store]", sentinel, &on_sentinel[..]),
    ] {
        let base = parse("base.toml", &format!("{header}\n{base}\n"))
            .unwrap_or_else(|e| panic!("the base for {header} is invalid: {e}"));
        let documented = reload_cells(&page, &format!("`{header}`"));
        for (field, line) in samples {
            let text = format!("{header}\n{line}\n");
            let next = parse("sample.toml", &text)
                .unwrap_or_else(|e| panic!("the sample for {header} `{field}` is invalid: {e}"));
            let mut named = base.server.needing_restart(&next.server);
            named.extend(base.store.needing_restart(&next.store));
            let code = if named.is_empty() { "hot" } else { "restart" };
            let Some((_, said)) = documented.iter().find(|(f, _)| f == field) else {
                continue; // reported by `every_field_the_parser_takes_is_in_the_reference`
            };
            if !said.starts_with(code) {
                wrong.push(format!(
                    "{file}: {header} `{field}`: the reload column says `{said}`, but a reload {} (needing_restart: {named:?})",
                    if named.is_empty() { "applies it: write `hot`" } else { "leaves it for a restart: write `restart`" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
