//! `ratewarden check-config`, end to end on the real binary.

use std::process::{Command, Output};

fn check(path: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .args(["check-config", path])
        .output()
        .expect("the binary runs")
}

#[test]
fn the_example_config_resolves_to_its_rules() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/ratewarden.toml"
    );
    let out = check(example);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.starts_with("limit "), "{table}");
    assert!(table.contains("gcra 50/s, burst 100"), "{table}");
    assert!(table.contains("POST /login"), "{table}");
    assert!(table.contains("enforce, bare 429"), "{table}");
    assert!(table.contains("closed (503)"), "{table}");
    assert!(table.contains("6 rule(s), valid"), "{table}");
    // The gateway's bounds, with what a reload does to each.
    let bound = |field: &str| {
        let line = table.lines().find(|l| l.starts_with(field)).unwrap_or("");
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        bound("max_header_bytes"),
        ["max_header_bytes", "65536", "restart"]
    );
    assert_eq!(
        bound("upstream_response_timeout"),
        ["upstream_response_timeout", "30s", "applies"]
    );
    // What one Envoy call may carry, and who may make it.
    assert_eq!(
        bound("max_descriptors"),
        ["max_descriptors", "64", "applies"]
    );
    assert_eq!(
        bound("max_message_bytes"),
        ["max_message_bytes", "1048576", "restart"]
    );
    assert_eq!(bound("clients"), ["clients", "trusted_proxies", "applies"]);
}

#[test]
fn check_config_shows_the_bounds_a_file_sets() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bounds.toml");
    std::fs::write(
        &path,
        "[server]\nmax_connections_per_client = 2\nupstream_response_timeout = \"1500ms\"\nidle_timeout = \"90s\"\n",
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.lines().any(|l| l.split_whitespace().eq([
            "max_connections_per_client",
            "2",
            "restart"
        ])),
        "{table}"
    );
    assert!(
        table.contains("upstream_response_timeout   1500ms"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().eq(["idle_timeout", "90s", "restart"])),
        "{table}"
    );
    std::fs::write(&path, "[server]\nmax_header_bytes = 100\n").unwrap();
    let out = check(path.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!(
            "error: {}:2:20: `[server]`: `max_header_bytes` must be at least 8192",
            path.display()
        )),
        "{err}"
    );
}

#[test]
fn a_bad_config_fails_with_every_error_located() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bad.toml");
    std::fs::write(
        &path,
        "[[limit]]\nname = \"k\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"fast\"\nburst = -1\n",
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let file = path.display();
    assert!(
        err.contains(&format!("error: {file}:5:8: limit `k`: `rate`")),
        "{err}"
    );
    assert!(
        err.contains(&format!("error: {file}:6:9: limit `k`: `burst`")),
        "{err}"
    );
    assert!(err.contains("2 problem(s)"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_missing_config_says_so() {
    let out = check("/no/such/ratewarden.toml");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("/no/such/ratewarden.toml: cannot read the file"),
        "{err}"
    );
}

/// Issue 12: `check-config` called a Redis URL valid that `serve` then refused to start with;
/// both now build the store the same way.
#[test]
fn a_redis_url_serve_would_refuse_fails_the_check() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let cases = [
        ("bad-redis-url.toml", "kind = \"redis\"\nurl = \"localhost:6379\""),
        (
            "bad-cluster-node.toml",
            "kind = \"redis-cluster\"\nnodes = [\"redis://127.0.0.1:7000\", \"not a url\"]",
        ),
        (
            "missing-ca.toml",
            "kind = \"redis\"\nurl = \"rediss://127.0.0.1:6380\"\ntls_ca_file = \"/no/such/ca.pem\"",
        ),
    ];
    for (name, store) in cases {
        let path = dir.join(name);
        std::fs::write(&path, format!("[store]\n{store}\n")).unwrap();
        let out = check(path.to_str().unwrap());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(
            err.starts_with(&format!("error: {}: `[store]", path.display())),
            "{name}: {err}"
        );
        assert!(out.stdout.is_empty(), "{name}");
    }
    // A URL serve accepts passes (nothing is connected).
    let path = dir.join("good-redis-url.toml");
    std::fs::write(
        &path,
        "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:1\"\n",
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `check-config` and `explain` showed an adaptive rule as its strategy alone: whether its
/// excess waits, for how long and in which lanes, was not to be seen.
#[test]
fn check_config_and_explain_describe_a_rules_queue() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("queue.toml");
    std::fs::write(
        &path,
        r#"
[[limit]]
name = "upstream"
key = ["global"]
algorithm = "adaptive-concurrency"
strategy = "vegas"

[limit.queue]
key = "header:x-team"
max_wait = "250ms"
queues = 32
hand = 4
queue_length = 20

[limit.queue.weights]
"team-a" = 4
"team-b" = 2
"#,
    )
    .unwrap();
    let described = "adaptive-concurrency (vegas), queued by header:x-team up to 250ms \
                     (32 queues, hand 4, 20 each), weights team-a=4 team-b=2";
    let out = check(path.to_str().unwrap());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{table}");
    assert!(table.contains(described), "{table}");
    let out = Command::new(env!("CARGO_BIN_EXE_ratewarden"))
        .arg("explain")
        .arg("--config")
        .arg(&path)
        .args(["--request", r#"{"ip": "203.0.113.7", "path": "/"}"#])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(text.contains(described), "{text}");
}

#[test]
fn an_admin_listener_off_loopback_needs_a_token_or_an_explicit_opt_out() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-access");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let open = "[server]\nlisten = \"127.0.0.1:8080\"\nadmin = \"0.0.0.0:9090\"\n";
    let run = |path: &str, env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ratewarden"));
        command.args(["check-config", path]);
        match env {
            Some(token) => command.env("RATEWARDEN_ADMIN_TOKEN", token),
            None => command.env_remove("RATEWARDEN_ADMIN_TOKEN"),
        };
        let out = command.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // No credential: refused where `admin` is written, naming every way out.
    let (ok, _, stderr) = run(&write("open.toml", open), None);
    assert!(!ok, "an open admin listener off loopback passed the check");
    assert!(stderr.contains("open.toml:3:"), "{stderr}");
    for named in [
        "admin_token_file",
        "RATEWARDEN_ADMIN_TOKEN",
        "admin_insecure",
    ] {
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
    // The explicit opt-out, a token from the environment, a token from a file.
    let insecure = write("insecure.toml", &format!("{open}admin_insecure = true\n"));
    let (ok, stdout, stderr) = run(&insecure, None);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("0.0.0.0:9090, no token (admin_insecure)"),
        "{stdout}"
    );
    let secret = "0123456789abcdef-from-env";
    let (ok, stdout, stderr) = run(&write("env.toml", open), Some(secret));
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("bearer token from environment RATEWARDEN_ADMIN_TOKEN"),
        "{stdout}"
    );
    assert!(!stdout.contains(secret) && !stderr.contains(secret));
    let token = dir.join("token");
    std::fs::write(&token, "0123456789abcdef-from-file\n").unwrap();
    let with_file = format!("{open}admin_token_file = {:?}\n", token.to_str().unwrap());
    let (ok, stdout, stderr) = run(&write("file.toml", &with_file), None);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("bearer token from file"), "{stdout}");
    // Both at once is ambiguous; a missing file, a short or spaced token are located.
    let (ok, _, stderr) = run(&write("both.toml", &with_file), Some(secret));
    assert!(
        !ok && stderr.contains("both.toml:4:") && stderr.contains("keep one"),
        "{stderr}"
    );
    let missing = format!("{open}admin_token_file = \"/nonexistent/ratewarden-token\"\n");
    let (ok, _, stderr) = run(&write("missing.toml", &missing), None);
    assert!(!ok && stderr.contains("missing.toml:4:"), "{stderr}");
    assert!(
        stderr.contains("cannot read /nonexistent/ratewarden-token"),
        "{stderr}"
    );
    for bad in ["short\n", "0123456789 abcdef-spaced\n"] {
        std::fs::write(&token, bad).unwrap();
        let (ok, _, stderr) = run(&write("bad.toml", &with_file), None);
        assert!(!ok && stderr.contains("bad.toml:4:"), "{bad:?}: {stderr}");
        assert!(!stderr.contains(bad.trim()), "the token is shown: {stderr}");
    }
    let (ok, _, stderr) = run(&write("short-env.toml", open), Some("short"));
    assert!(!ok && stderr.contains("RATEWARDEN_ADMIN_TOKEN"), "{stderr}");
    // A name that is not one, in `admin_hosts`.
    let hosts = "[server]\nadmin_hosts = [\"ok.internal\", \"evil.example:80\"]\n";
    let (ok, _, stderr) = run(&write("hosts.toml", hosts), None);
    assert!(
        !ok && stderr.contains("hosts.toml:2:") && stderr.contains("evil.example:80"),
        "{stderr}"
    );
}

#[test]
fn an_upstream_nobody_answers_on_passes_with_a_warning_naming_it() {
    let dir = std::env::temp_dir().join(format!("ratewarden-check-up-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A port nobody listens on (bound, read, released).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(
        &path,
        format!("[server]\nupstream = \"http://{closed}\"\n\n[[limit]]\nname = \"all\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\n"),
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    let err = String::from_utf8_lossy(&out.stderr);
    // It may come up after us: a warning, not a failure.
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "warning: {}: `[server] upstream` http://{closed}: cannot connect",
            path.display()
        )),
        "{err}"
    );
    // One that answers passes quietly.
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = open.local_addr().unwrap();
    std::fs::write(
        &path,
        format!("[server]\nupstream = \"http://{addr}\"\n\n[[limit]]\nname = \"all\"\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nrate = \"5/s\"\nburst = 5\n"),
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_config_shows_what_quota_buckets_a_rule_takes_and_their_weights() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("buckets.toml");
    let rule = |weights: &str| {
        format!(
            "[[limit]]\nname = \"api\"\nmatch = {{ domain = \"edge\", bucket = \"name=api,tier\" }}\nkey = [\"global\"]\n{weights}\nalgorithm = \"gcra\"\nrate = \"600/s\"\nburst = 60\n"
        )
    };
    std::fs::write(
        &path,
        rule(r#"weights = { "tier=gold" = 3, "tier=silver" = 2 }"#),
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{table}");
    assert!(
        table.contains("envoy edge bucket {name=api, tier} weights tier=gold:3 tier=silver:2"),
        "{table}"
    );
    std::fs::write(&path, rule(r#"weights = { "tier=gold" = 0 }"#)).unwrap();
    let out = check(path.to_str().unwrap());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success());
    assert!(
        stderr.contains("buckets.toml:5:27: limit `api`: the weight of `tier=gold` in `weights` must be a whole number above zero, not 0"),
        "{stderr}"
    );
}

#[test]
fn check_config_says_which_rules_wait_for_a_replica() {
    // Behind Sentinel a closed rule waits for one replica unless it says otherwise; the
    // table says so, as the operator must know why such a rule answers 503 after a failover
    // until a replica attaches.
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("replicas.toml");
    std::fs::write(
        &path,
        r#"
[store]
kind = "redis-sentinel"
sentinels = ["redis://10.0.0.1:26379"]
master_name = "mymaster"
deadline = "50ms"

[[limit]]
name = "pay"
key = ["ip"]
algorithm = "fixed-window"
limit = 5
window = "1h"
on_store_failure = "closed"

[[limit]]
name = "browse"
key = ["ip"]
algorithm = "fixed-window"
limit = 500
window = "1m"

[[limit]]
name = "audit"
key = ["ip"]
algorithm = "fixed-window"
limit = 500
window = "1m"
wait_for_replicas = 2
"#,
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("a row for {name}: {table}"))
            .to_owned()
    };
    assert!(
        row("pay").contains("closed (503), waits for 1 replica"),
        "{table}"
    );
    assert!(!row("browse").contains("waits"), "{table}");
    assert!(
        row("audit").contains("open, waits for 2 replicas"),
        "{table}"
    );
}

/// A certificate `serve` could not use fails the check at the line naming it; good ones
/// are listed with their listener.
#[test]
fn tls_files_are_read_as_serve_reads_them() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let tls = format!("{}/../../fixtures/tls", env!("CARGO_MANIFEST_DIR"));
    let path = dir.join("tls-mismatched.toml");
    std::fs::write(
        &path,
        format!("[tls.listen]\ncert = \"{tls}/gateway.pem\"\nkey = \"{tls}/other.key\"\n"),
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}:3:7: `[tls.listen]`: `key`", path.display())),
        "{err}"
    );
    assert!(err.contains("is not the key of `cert`"), "{err}");
    let path = dir.join("tls-good.toml");
    std::fs::write(
        &path,
        format!(
            "[tls.listen]\ncert = \"{tls}/gateway-chain.pem\"\nkey = \"{tls}/gateway.key\"\nclient_ca = \"{tls}/client-ca.pem\"\n"
        ),
    )
    .unwrap();
    let out = check(path.to_str().unwrap());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("[tls.listen]: 1 certificate(s), client certificates required"),
        "{stdout}"
    );
}
