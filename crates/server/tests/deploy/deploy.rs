//! What `deploy/` ships, run as far as this machine can: the image's command on its mounted
//! config layout, the systemd unit through `systemd-analyze` and its reload, the Kubernetes
//! manifests against their configs and a live server, and the dashboard and alerts against a
//! live `/metrics`.
//!
//! No container is built or run here (no base image can be pulled), and no cluster is asked:
//! the image's entrypoint, command and health check run outside a container, with the debug
//! binary, against the same file layout under a scratch directory.

#[path = "../common/mod.rs"]
mod common;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{get, Served};
use http::StatusCode;
use serde_json::Value;

// ---------------------------------------------------------------------------------------
// Reading what `deploy/` holds

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file of the repository, read whole.
fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every document of a YAML file, as JSON values (plain scalars that are integers as
/// numbers, every other scalar as a string): enough to compare kinds, names and ports.
fn yaml_documents(path: &str) -> Vec<Value> {
    use saphyr_parser::{Event, Parser, ScalarStyle};
    let text = read(path);
    let mut parser = Parser::new_from_str(&text);
    let mut next = || -> Event<'_> {
        let (event, _) = parser
            .next_event()
            .expect("the YAML goes on")
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        event
    };
    // A stack of open collections: a list, or a map with the key waiting for its value.
    enum Open {
        List(Vec<Value>),
        Map(serde_json::Map<String, Value>, Option<String>),
    }
    let mut documents = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    loop {
        let value = match next() {
            Event::StreamEnd => return documents,
            Event::Scalar(text, style, _, _) => {
                let number = (style == ScalarStyle::Plain)
                    .then(|| text.parse::<i64>().ok())
                    .flatten();
                number.map_or_else(|| Value::String(text.into_owned()), Value::from)
            }
            Event::SequenceStart(..) => {
                stack.push(Open::List(Vec::new()));
                continue;
            }
            Event::MappingStart(..) => {
                stack.push(Open::Map(serde_json::Map::new(), None));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::List(items)) => Value::Array(items),
                Some(Open::Map(map, _)) => Value::Object(map),
                None => panic!("{path}: a collection closed that was not open"),
            },
            Event::Alias(_) => panic!("{path}: the manifests use no aliases"),
            _ => continue,
        };
        match stack.last_mut() {
            None => documents.push(value),
            Some(Open::List(items)) => items.push(value),
            Some(Open::Map(_, key @ None)) => {
                *key = Some(match value {
                    Value::String(s) => s,
                    other => other.to_string(),
                });
            }
            Some(Open::Map(map, key)) => {
                map.insert(key.take().unwrap(), value);
            }
        }
    }
}

/// The value at `path` (keys, or indexes of lists), `Null` when there is none.
fn at<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    path.iter()
        .fold(value, |v, step| match step.parse::<usize>() {
            Ok(i) => &v[i],
            Err(_) => &v[*step],
        })
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a string: {value}"))
}

fn items(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

/// The token the tests write where a config reads its admin token.
const TOKEN: &str = "deploy-test-token-0123456789abcdef";

/// A config written for a container, with its absolute paths under `/etc` and `/run` moved
/// under `scratch`, and the admin token written where it then reads it.
fn relocated(config: &str, scratch: &Path) -> String {
    let under = |absolute: &str| format!("\"{}{absolute}", scratch.display());
    let text = config
        .replace("\"/run/", &under("/run/"))
        .replace("\"/etc/", &under("/etc/"));
    if let Some(at) = text.find("admin_token_file = \"") {
        let start = at + "admin_token_file = \"".len();
        let end = start + text[start..].find('"').unwrap();
        let file = PathBuf::from(&text[start..end]);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    }
    text
}

/// [`relocated`], and runnable here: every listener on `0.0.0.0:PORT` moves to
/// `127.0.0.1:0` (the tests bind loopback only, on ports the kernel picks).
fn runnable(config: &str, scratch: &Path) -> String {
    let config = relocated(config, scratch);
    let mut out = String::with_capacity(config.len());
    let mut rest = config.as_str();
    while let Some(at) = rest.find("\"0.0.0.0:") {
        out.push_str(&rest[..at]);
        out.push_str("\"127.0.0.1:0\"");
        let after = &rest[at + 1..];
        rest = &after[after.find('"').expect("a closing quote") + 1..];
    }
    out.push_str(rest);
    out
}

/// A scratch directory of its own for `name`, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ratewarden-deploy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The ports a container config listens on: `listen`, `grpc` and `admin` (parsed and
/// validated as `serve` does, its token read from a scratch copy).
fn config_ports(path: &str) -> (i64, Option<i64>, Option<i64>) {
    let dir = scratch(&format!("ports-{}", path.replace('/', "-")));
    let config = ratewarden_policy::config::parse(path, &relocated(&read(path), &dir))
        .unwrap_or_else(|e| panic!("{path} is a valid config: {e}"));
    let port = |address: Option<SocketAddr>| address.map(|a| i64::from(a.port()));
    let server = &config.server;
    (
        i64::from(server.listen.port()),
        port(server.grpc),
        port(server.admin),
    )
}

// ---------------------------------------------------------------------------------------
// The image

/// An instruction's JSON (exec form) argument: `ENTRYPOINT ["a", "b"]`.
fn exec_form(dockerfile: &str, instruction: &str) -> Vec<String> {
    let mut logical = String::new();
    for line in dockerfile.lines() {
        if logical.is_empty() && !line.starts_with(&format!("{instruction} ")) {
            continue;
        }
        logical.push_str(line.trim_end().trim_end_matches('\\'));
        if !line.trim_end().ends_with('\\') {
            break;
        }
    }
    let json = &logical[logical
        .find('[')
        .unwrap_or_else(|| panic!("{instruction} in exec form"))..];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{instruction}: {e}: {json}"))
}

/// The image's command, run as the image runs it: the entrypoint (the debug binary in the
/// installed binary's place) with the image's `CMD`, on the config the image copies to where
/// users mount theirs, under a scratch root. It serves; its health check passes against it;
/// the admin token mounted beside it guards `/metrics`; and the ports it exposes are the
/// ones the config listens on.
#[tokio::test]
async fn the_image_command_serves_the_mounted_config_and_passes_its_health_check() {
    let dockerfile = read("deploy/Dockerfile");

    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the image names its user");
    let uid = user.split(':').next().unwrap();
    assert!(
        uid != "0" && uid != "root",
        "the image runs as a non-root user, not {user}"
    );

    // The config the image ships where a mounted one goes.
    let copy = dockerfile
        .lines()
        .find(|l| l.starts_with("COPY deploy/ratewarden.toml "))
        .expect("the image copies deploy/ratewarden.toml");
    let config_path = copy.rsplit(' ').next().unwrap();

    let entrypoint = exec_form(&dockerfile, "ENTRYPOINT");
    let cmd = exec_form(&dockerfile, "CMD");
    assert_eq!(entrypoint, ["/usr/local/bin/ratewarden"]);
    assert!(
        cmd.iter().any(|a| a == config_path),
        "CMD {cmd:?} reads the config at {config_path}"
    );

    let exposed: BTreeSet<i64> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|l| l.split_whitespace().map(|p| p.parse::<i64>().unwrap()))
        .collect();
    let (listen, grpc, admin) = config_ports("deploy/ratewarden.toml");
    let listened: BTreeSet<i64> = [Some(listen), grpc, admin].into_iter().flatten().collect();
    assert_eq!(
        exposed, listened,
        "EXPOSE names the ports the config listens on"
    );

    // The mounted layout, under a scratch root.
    let dir = scratch("image");
    let config = runnable(&read("deploy/ratewarden.toml"), &dir);
    let mounted = dir.join(config_path.trim_start_matches('/'));
    std::fs::create_dir_all(mounted.parent().unwrap()).unwrap();
    std::fs::write(&mounted, config).unwrap();
    let args: Vec<String> = cmd
        .iter()
        .map(|a| {
            if a == config_path {
                mounted.display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let mut served = Served::spawn(&args).await;
    let admin = served.admin.expect("an admin listener");

    // The health check, as Docker runs it, at the admin listener's port here.
    let health = exec_form(&dockerfile, "HEALTHCHECK");
    let health: Vec<String> = health
        .iter()
        .map(|a| {
            a.replace(
                "/dev/tcp/127.0.0.1/9090",
                &format!("/dev/tcp/127.0.0.1/{}", admin.port()),
            )
        })
        .collect();
    assert!(
        health.iter().any(|a| a.contains(&admin.port().to_string())),
        "the health check asks the admin listener at 9090: {health:?}"
    );
    let status = Command::new(&health[0])
        .args(&health[1..])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "the health check passes on a ready server"
    );

    let metrics = get(admin, "/metrics", &[]).await;
    assert_eq!(
        metrics.status,
        StatusCode::UNAUTHORIZED,
        "the token guards /metrics"
    );
    let bearer = format!("Bearer {TOKEN}");
    let metrics = get(admin, "/metrics", &[("authorization", bearer.as_str())]).await;
    assert_eq!(metrics.status, StatusCode::OK);

    // Shutting down, it stops being healthy before it exits.
    served.signal("TERM");
    let unhealthy = common::eventually(|| {
        let status = Command::new(&health[0])
            .args(&health[1..])
            .status()
            .unwrap();
        std::future::ready(!status.success())
    })
    .await;
    assert!(unhealthy, "the health check fails once shutdown begins");
    let _ = served.log();
}

// ---------------------------------------------------------------------------------------
// The systemd unit

/// A `Key=value` of the unit, the last one set.
fn unit_value<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
}

/// `systemd-analyze`, or why the test cannot run (scripts/test installs it).
fn systemd_analyze() -> Option<PathBuf> {
    let found = Command::new("systemd-analyze").arg("--version").output();
    match found {
        Ok(out) if out.status.success() => Some(PathBuf::from("systemd-analyze")),
        _ => {
            eprintln!(
                "SKIPPED: systemd-analyze is not installed (scripts/test installs `systemd`)"
            );
            None
        }
    }
}

/// Where the host keeps systemd's own units (the targets a unit is ordered against), which
/// `verify --root` looks for under the scratch root.
fn host_units() -> PathBuf {
    ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .into_iter()
        .map(PathBuf::from)
        .find(|d| d.join("multi-user.target").exists())
        .expect("systemd's units are installed with systemd-analyze")
}

/// Copies `from` into `to`, directories whole.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else if kind.is_symlink() {
            let link = std::fs::read_link(entry.path()).unwrap();
            std::os::unix::fs::symlink(link, target).unwrap();
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A root laid out as a machine where the unit is installed as docs/deploy.md says, with
/// the binary at `binary` (a path under the root, as `usr/bin/ratewarden`) and the
/// drop-ins `drop_ins` in `ratewarden.service.d/`: what `systemd-analyze verify --root`
/// says of it (empty when it is happy), and whether it passed.
fn verify_installed(name: &str, binary: &str, drop_ins: &[(&str, &str)]) -> (bool, String) {
    use std::os::unix::fs::PermissionsExt;
    let root = scratch(name);
    copy_tree(&host_units(), &root.join("usr/lib/systemd/system"));
    let units = root.join("etc/systemd/system");
    std::fs::create_dir_all(units.join("ratewarden.service.d")).unwrap();
    std::fs::copy(
        root_path("deploy/systemd/ratewarden.service"),
        units.join("ratewarden.service"),
    )
    .unwrap();
    for (file, text) in drop_ins {
        std::fs::write(units.join("ratewarden.service.d").join(file), text).unwrap();
    }
    // `verify` asks only that each command is an executable where systemd looks; the unit's
    // commands run the real binary in the test below.
    for program in [binary, "bin/kill"] {
        let path = root.join(program);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg("ratewarden.service")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stderr).into_owned()
        + &String::from_utf8_lossy(&verify.stdout);
    (verify.status.success() && said.trim().is_empty(), said)
}

/// A file of the repository's, by its path from the root.
fn root_path(path: &str) -> PathBuf {
    root().join(path)
}

/// The unit verifies where users install the binary: a package's `/usr/bin`, `cargo install
/// --root /usr/local`'s `/usr/local/bin`, and another place named by the shipped drop-in;
/// a binary only in `~/.cargo/bin` (a plain `cargo install`) is refused, naming the
/// command, as docs/deploy.md says. `systemd-analyze security` rates it "OK" or better; it
/// runs as a dynamic user without new privileges.
#[test]
fn the_systemd_unit_verifies_where_the_binary_is_installed_and_is_hardened() {
    let unit = read("deploy/systemd/ratewarden.service");
    assert_eq!(unit_value(&unit, "DynamicUser"), Some("yes"));
    assert_eq!(unit_value(&unit, "NoNewPrivileges"), Some("yes"));
    assert_eq!(unit_value(&unit, "ProtectHome"), Some("yes"));
    assert_eq!(
        unit_value(&unit, "ExecReload"),
        Some("/bin/kill -HUP $MAINPID")
    );
    if systemd_analyze().is_none() {
        return;
    }
    for (place, binary) in [
        ("a package", "usr/bin/ratewarden"),
        (
            "cargo install --root /usr/local",
            "usr/local/bin/ratewarden",
        ),
    ] {
        let name = format!("systemd-{}", binary.replace('/', "-"));
        let (ok, said) = verify_installed(&name, binary, &[]);
        assert!(ok, "systemd-analyze verify, installed by {place}: {said}");
    }
    let (ok, said) = verify_installed("systemd-cargo", "root/.cargo/bin/ratewarden", &[]);
    assert!(
        !ok && said.contains("Command ratewarden is not executable"),
        "a binary only in ~/.cargo/bin is not found by the unit: {said}"
    );
    let drop_in = read("deploy/systemd/binary-path.conf");
    for line in drop_in.lines().filter(|l| l.starts_with("Exec")) {
        assert!(
            !line.contains("/home/") && !line.contains("/root/"),
            "ProtectHome hides home directories from the service: {line}"
        );
    }
    let (ok, said) = verify_installed(
        "systemd-opt",
        "opt/ratewarden/bin/ratewarden",
        &[("binary-path.conf", &drop_in)],
    );
    assert!(
        ok,
        "systemd-analyze verify, binary-path.conf's place: {said}"
    );
    // Without the drop-in, the same place is not found: the drop-in is what names it.
    let (ok, _) = verify_installed("systemd-opt-bare", "opt/ratewarden/bin/ratewarden", &[]);
    assert!(!ok, "/opt/ratewarden/bin is outside systemd's search path");

    // Exposure is scored 0 to 10 (10 x this threshold): 2.0 is the top of "OK".
    let copy = scratch("systemd").join("ratewarden.service");
    std::fs::write(&copy, &unit).unwrap();
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--threshold=20", "--no-pager"])
        .arg(&copy)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&security.stdout);
    assert!(
        security.status.success(),
        "systemd-analyze security: {}",
        said.lines().last().unwrap_or_default()
    );
}

/// The unit's commands, run as systemd runs them on the example config it tells users to
/// install: `ExecStartPre` accepts it, `ExecStart` serves it, and `ExecReload` (SIGHUP to
/// the main process) rereads it.
#[tokio::test]
async fn the_systemd_unit_commands_start_and_reload_the_example_config() {
    let unit = read("deploy/systemd/ratewarden.service");
    let config_path = "/etc/ratewarden/ratewarden.toml";
    let dir = scratch("systemd-run");
    let local = dir.join("ratewarden.toml");
    let example = read("examples/ratewarden.toml").replace("127.0.0.1:8080", "127.0.0.1:0");
    let example = example.replace("127.0.0.1:9090", "127.0.0.1:0");
    std::fs::write(&local, &example).unwrap();
    let command = |key: &str| -> Vec<String> {
        unit_value(&unit, key)
            .unwrap_or_else(|| panic!("the unit sets {key}"))
            .split_whitespace()
            .map(|a| match a {
                "ratewarden" => env!("CARGO_BIN_EXE_ratewarden").to_owned(),
                a if a == config_path => local.display().to_string(),
                a => a.to_owned(),
            })
            .collect()
    };
    let pre = command("ExecStartPre");
    let checked = Command::new(&pre[0]).args(&pre[1..]).output().unwrap();
    assert!(
        checked.status.success(),
        "ExecStartPre: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let start = command("ExecStart");
    assert_eq!(start[0], env!("CARGO_BIN_EXE_ratewarden"));
    let mut served = Served::spawn(&start[1..]).await;
    let admin = served.admin.expect("an admin listener");
    let version = || async move {
        let text = get(admin, "/metrics", &[]).await.body;
        text.lines()
            .find_map(|l| l.strip_prefix("ratewarden_config_version "))
            .map(str::to_owned)
    };
    assert_eq!(version().await.as_deref(), Some("1"));

    let reload: Vec<String> = command("ExecReload")
        .into_iter()
        .map(|a| a.replace("$MAINPID", &served.child.id().to_string()))
        .collect();
    let status = Command::new(&reload[0])
        .args(&reload[1..])
        .status()
        .unwrap();
    assert!(status.success(), "ExecReload signals the server");
    let reloaded = common::eventually(|| async { version().await.as_deref() == Some("2") }).await;
    assert!(reloaded, "ExecReload rereads the config:\n{}", served.log());
}

// ---------------------------------------------------------------------------------------
// Kubernetes

/// A kustomization's resources, config files, and the object of each kind it makes.
struct Kustomized {
    dir: String,
    objects: Vec<Value>,
    /// ConfigMap generator name -> its files.
    config_maps: HashMap<String, Vec<String>>,
    /// Secret generator name -> its files.
    secrets: HashMap<String, Vec<String>>,
    namespace: String,
}

fn kustomized(dir: &str) -> Kustomized {
    let kustomization = yaml_documents(&format!("{dir}/kustomization.yaml")).remove(0);
    assert_eq!(text(&kustomization["kind"]), "Kustomization");
    let mut objects = Vec::new();
    for resource in items(&kustomization["resources"]) {
        objects.extend(yaml_documents(&format!("{dir}/{}", text(resource))));
    }
    let generated = |key: &str| -> HashMap<String, Vec<String>> {
        items(&kustomization[key])
            .iter()
            .map(|g| {
                let files = items(&g["files"])
                    .iter()
                    .map(|f| text(f).to_owned())
                    .collect();
                (text(&g["name"]).to_owned(), files)
            })
            .collect()
    };
    Kustomized {
        dir: dir.to_owned(),
        objects,
        config_maps: generated("configMapGenerator"),
        secrets: generated("secretGenerator"),
        namespace: text(&kustomization["namespace"]).to_owned(),
    }
}

impl Kustomized {
    fn one(&self, kind: &str) -> &Value {
        let mut found = self.objects.iter().filter(|o| o["kind"] == kind);
        let one = found
            .next()
            .unwrap_or_else(|| panic!("{}: a {kind}", self.dir));
        assert!(found.next().is_none(), "{}: one {kind}", self.dir);
        one
    }
}

/// Checks one kustomization holding a Deployment with a `ratewarden` container: its command
/// reads the generated ConfigMap's file where it is mounted, the token where the Secret is
/// mounted; its ports are the config's; its probes are `/live` and `/ready` on the admin
/// port; the Service's target ports exist; and a server started on that config answers the
/// probes as the kubelet asks them (by the pod's address).
async fn check_kustomization(dir: &str) -> Kustomized {
    let k = kustomized(dir);
    let deployment = k.one("Deployment");
    let pod = at(deployment, &["spec", "template", "spec"]);
    let container = items(&pod["containers"])
        .iter()
        .find(|c| text(&c["image"]).starts_with("ratewarden"))
        .unwrap_or_else(|| panic!("{dir}: a ratewarden container"));
    let args: Vec<&str> = items(&container["args"]).iter().map(text).collect();
    assert_eq!(
        args[..2],
        ["serve", "--config"],
        "{dir}: the container serves"
    );
    let config_path = Path::new(args[2]);

    // Where each volume is mounted.
    let mounts: HashMap<&str, &str> = items(&container["volumeMounts"])
        .iter()
        .map(|m| (text(&m["name"]), text(&m["mountPath"])))
        .collect();
    let mounted = |source: &str, name: &str| -> &str {
        let volume = items(&pod["volumes"])
            .iter()
            .find(|v| {
                let named = if source == "configMap" {
                    "name"
                } else {
                    "secretName"
                };
                v[source][named] == name
            })
            .unwrap_or_else(|| panic!("{dir}: a volume of {source} {name}"));
        mounts[text(&volume["name"])]
    };
    let (map_name, map_files) = k.config_maps.iter().next().expect("a generated ConfigMap");
    let file = config_path.file_name().unwrap().to_str().unwrap();
    assert!(
        map_files.iter().any(|f| f == file),
        "{dir}: {file} is generated"
    );
    assert_eq!(
        Path::new(mounted("configMap", map_name)),
        config_path.parent().unwrap(),
        "{dir}: the ConfigMap is mounted where --config reads it"
    );
    let config_file = format!("{dir}/{file}");
    let config_text = read(&config_file);
    let (secret_name, secret_files) = k.secrets.iter().next().expect("a generated Secret");
    let token_path = format!("{}/{}", mounted("secret", secret_name), secret_files[0]);
    assert!(
        config_text.contains(&format!("admin_token_file = \"{token_path}\"")),
        "{config_file} reads the admin token where the Secret is mounted ({token_path})"
    );

    // Ports: the container's are the config's.
    let ports: HashMap<&str, i64> = items(&container["ports"])
        .iter()
        .map(|p| (text(&p["name"]), p["containerPort"].as_i64().unwrap()))
        .collect();
    let (listen, grpc, admin) = config_ports(&config_file);
    assert_eq!(ports.get("http"), Some(&listen), "{dir}: http is `listen`");
    assert_eq!(ports.get("grpc").copied(), grpc, "{dir}: grpc is `grpc`");
    assert_eq!(
        ports.get("admin").copied(),
        admin,
        "{dir}: admin is `admin`"
    );
    let port_of = |port: &Value| -> i64 {
        port.as_i64().unwrap_or_else(|| {
            let all: HashMap<&str, i64> = items(&pod["containers"])
                .iter()
                .flat_map(|c| items(&c["ports"]))
                .map(|p| (text(&p["name"]), p["containerPort"].as_i64().unwrap()))
                .collect();
            *all.get(text(port))
                .unwrap_or_else(|| panic!("{dir}: no container port named {port}"))
        })
    };

    // Probes: on the admin listener, at paths it serves.
    let mut probes = Vec::new();
    for (probe, path) in [("livenessProbe", "/live"), ("readinessProbe", "/ready")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(text(&get["path"]), path, "{dir}: {probe}");
        assert_eq!(
            Some(port_of(&get["port"])),
            admin,
            "{dir}: {probe} on the admin port"
        );
        probes.push(path);
    }

    // The Service sends to ports that exist.
    let service = k.one("Service");
    for port in items(at(service, &["spec", "ports"])) {
        port_of(&port["targetPort"]);
    }
    assert_eq!(
        at(service, &["spec", "selector"]),
        at(deployment, &["spec", "selector", "matchLabels"]),
        "{dir}: the Service selects the Deployment's pods"
    );

    // The config runs, and answers the probes.
    let scratch = scratch(&format!("k8s-{}", dir.replace('/', "-")));
    let config = scratch.join(file);
    std::fs::write(&config, runnable(&config_text, &scratch)).unwrap();
    let served = Served::spawn(["serve", "--config", &config.display().to_string()]).await;
    let addr = served.admin.expect("an admin listener");
    let host = format!("10.1.2.3:{}", admin.unwrap());
    for path in probes {
        let answer = get(addr, path, &[("host", host.as_str())]).await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{dir}: {path} as the kubelet asks"
        );
    }
    k
}

/// The decision service's manifests: as above, and the address the ingress-nginx example's
/// `auth-url` names is its Service's, on its `http` port, at the nginx door.
#[tokio::test]
async fn the_decision_service_manifests_match_their_config_and_the_ingress() {
    let k = check_kustomization("deploy/kubernetes/decision").await;
    let service = k.one("Service");
    let name = text(at(service, &["metadata", "name"]));
    let http = items(at(service, &["spec", "ports"]))
        .iter()
        .find(|p| p["name"] == "http")
        .expect("an http port");
    let expected = format!(
        "http://{name}.{}.svc.cluster.local:{}/v1/auth/nginx",
        k.namespace, http["port"]
    );
    let ingress = yaml_documents("deploy/kubernetes/ingress-nginx/ingress.yaml").remove(0);
    assert_eq!(text(&ingress["kind"]), "Ingress");
    let auth = &ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/auth-url"];
    assert_eq!(text(auth), expected);
    // front-doors.md names the same address.
    assert!(
        read("docs/front-doors.md").contains(&expected[..expected.len() - "/v1/auth/nginx".len()])
    );
}

/// The sidecar gateway's manifests: as above, and the gateway forwards to the app's port in
/// the same pod.
#[tokio::test]
async fn the_sidecar_manifests_match_their_config() {
    let k = check_kustomization("deploy/kubernetes/sidecar").await;
    let config = read("deploy/kubernetes/sidecar/ratewarden.toml");
    let pod = at(k.one("Deployment"), &["spec", "template", "spec"]);
    let app_port = items(&pod["containers"])
        .iter()
        .filter(|c| !text(&c["image"]).starts_with("ratewarden"))
        .flat_map(|c| items(&c["ports"]))
        .map(|p| p["containerPort"].as_i64().unwrap())
        .next()
        .expect("the app's port");
    assert!(
        config.contains(&format!("upstream = \"http://127.0.0.1:{app_port}\"")),
        "the gateway forwards to the app on the pod's loopback, port {app_port}"
    );
}

/// Every manifest against the Kubernetes API's own schemas, with `kubernetes-validate`
/// (PyPI; scripts/test installs it), strict: an unknown field is an error.
#[test]
fn the_kubernetes_manifests_pass_the_api_schemas() {
    let probe = Command::new("kubernetes-validate")
        .arg("--version")
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!(
            "SKIPPED: kubernetes-validate is not installed (scripts/test installs it with pip)"
        );
        return;
    }
    let mut files = Vec::new();
    for dir in ["decision", "sidecar", "ingress-nginx"] {
        for entry in std::fs::read_dir(root().join("deploy/kubernetes").join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap();
            if name.ends_with(".yaml") && name != "kustomization.yaml" {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 6, "the manifests: {files:?}");
    let out = Command::new("kubernetes-validate")
        .arg("--strict")
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubernetes-validate:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// The dashboard and the alerts

/// The metric names a `/metrics` text exposes: each sample's, and each family's with the
/// suffixes its type gives its samples (a family with no sample yet, as `shed` before the
/// first shed request, still names them).
fn exported_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (name, kind) = (words.next().unwrap(), words.next().unwrap());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

/// The `ratewarden_*` names `text` uses.
fn used_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("ratewarden_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

/// What a server with `config` (a container config, made runnable) exports at `/metrics`.
async fn scrape(name: &str, config: &str) -> BTreeSet<String> {
    let dir = scratch(name);
    let file = dir.join("ratewarden.toml");
    std::fs::write(&file, runnable(config, &dir)).unwrap();
    let served = Served::spawn(["serve", "--config", &file.display().to_string()]).await;
    let bearer = format!("Bearer {TOKEN}");
    let metrics = get(
        served.admin.unwrap(),
        "/metrics",
        &[("authorization", bearer.as_str())],
    )
    .await;
    assert_eq!(metrics.status, StatusCode::OK);
    exported_names(&metrics.body)
}

/// The Grafana dashboard and the Prometheus alerts name only metrics a live server exports:
/// one on the in-memory store, one on a Redis store (its breaker and late timeouts; Redis
/// need not answer, the server starts without it and reports its breaker).
#[tokio::test]
async fn the_dashboard_and_alerts_name_only_exported_metrics() {
    let container = read("deploy/ratewarden.toml");
    let mut exported = scrape("metrics-memory", &container).await;
    let redis = container.replace(
        "kind = \"memory\"",
        "kind = \"redis\"\nurl = \"redis://127.0.0.1:1\"",
    );
    exported.extend(scrape("metrics-redis", &redis).await);
    assert!(
        exported.contains("ratewarden_store_breaker"),
        "{exported:?}"
    );

    let dashboard_text = read("deploy/grafana/ratewarden.json");
    let dashboard: Value = serde_json::from_str(&dashboard_text).expect("the dashboard is JSON");
    let mut queries = 0;
    for panel in items(&dashboard["panels"]) {
        for target in items(&panel["targets"]) {
            assert!(
                text(&target["expr"]).contains("ratewarden_"),
                "panel {} queries Ratewarden",
                panel["title"]
            );
            queries += 1;
        }
    }
    assert!(queries >= 10, "the dashboard's queries: {queries}");
    let alerts = read("deploy/prometheus/alerts.yml");
    let rules = yaml_documents("deploy/prometheus/alerts.yml").remove(0);
    let names: Vec<&str> = items(&rules["groups"][0]["rules"])
        .iter()
        .map(|r| text(&r["alert"]))
        .collect();
    for wanted in [
        "RatewardenStoreFailing",
        "RatewardenStoreBreakerOpen",
        "RatewardenShedding",
        "RatewardenRuleRejectingFarMoreThanUsual",
        "RatewardenReloadFailed",
    ] {
        assert!(names.contains(&wanted), "an alert {wanted} in {names:?}");
    }

    for (file, used) in [
        (
            "deploy/grafana/ratewarden.json",
            used_names(&dashboard_text),
        ),
        ("deploy/prometheus/alerts.yml", used_names(&alerts)),
    ] {
        let unknown: Vec<_> = used.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics the server does not export: {unknown:?}"
        );
    }
}

/// The names of `exposition`'s samples: the series that exist (a family with no sample
/// yet, as `top_offender` before any key is refused, names none).
fn sampled_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l[..l.find(['{', ' ']).unwrap_or(l.len())].to_owned())
        .collect()
}

/// The series a server started with `config` exports at its first scrape, before any
/// request: what a dashboard shows the moment it is pointed at a new server.
async fn first_scrape(name: &str, config: &str, token: Option<&str>) -> BTreeSet<String> {
    let dir = scratch(&format!("{name}-config"));
    let file = dir.join("ratewarden.toml");
    std::fs::write(&file, config).unwrap();
    let served = Served::spawn(["serve", "--config", &file.display().to_string()]).await;
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("authorization", b.as_str()))
        .collect();
    let metrics = get(served.admin.unwrap(), "/metrics", &headers).await;
    assert_eq!(metrics.status, StatusCode::OK);
    sampled_names(&metrics.body)
}

/// On a server just started (the README's example config on the in-memory store, and the
/// container's config on Redis), every alert's expression and every dashboard panel's
/// queries name series that exist, at 0 where nothing has happened: an alert or a panel on
/// a series that appears only later reads "no data", not 0, and `rate()` misses its first
/// increment. A panel may wait for its series only where the dashboard says why (its
/// `noValue`): the top offenders (none until a key is refused), and the in-memory store's
/// panels on a Redis store.
#[tokio::test]
async fn a_fresh_server_exports_every_series_its_dashboards_and_alerts_use() {
    let example = read("examples/ratewarden.toml")
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:9090", "127.0.0.1:0");
    let dir = scratch("fresh-redis");
    let redis = runnable(&read("deploy/ratewarden.toml"), &dir).replace(
        "kind = \"memory\"",
        "kind = \"redis\"\nurl = \"redis://127.0.0.1:1\"",
    );
    let dashboard: Value =
        serde_json::from_str(&read("deploy/grafana/ratewarden.json")).expect("JSON");
    let rules = yaml_documents("deploy/prometheus/alerts.yml").remove(0);
    for (store, config, token, may_wait) in [
        ("memory", example, None, &["Top offenders"][..]),
        (
            "redis",
            redis,
            Some(TOKEN),
            &[
                "In-memory store: keys and bytes",
                "In-memory store: evictions and refused new keys",
                "Top offenders",
            ][..],
        ),
    ] {
        let exported = first_scrape(&format!("fresh-{store}"), &config, token).await;
        for rule in items(&rules["groups"][0]["rules"]) {
            let missing: Vec<_> = used_names(text(&rule["expr"]))
                .into_iter()
                .filter(|n| !exported.contains(n))
                .collect();
            assert!(
                missing.is_empty(),
                "on the {store} store, alert {} watches series a fresh server lacks: {missing:?}",
                text(&rule["alert"])
            );
        }
        let mut waiting = Vec::new();
        for panel in items(&dashboard["panels"]) {
            let title = text(&panel["title"]);
            let missing: Vec<_> = items(&panel["targets"])
                .iter()
                .flat_map(|t| used_names(text(&t["expr"])))
                .filter(|n| !exported.contains(n))
                .collect();
            if missing.is_empty() {
                continue;
            }
            waiting.push(title);
            assert!(
                panel["fieldConfig"]["defaults"]["noValue"].is_string(),
                "on the {store} store, panel {title:?} shows \"no data\" on a fresh server \
                 ({missing:?} absent) and does not say why"
            );
        }
        assert_eq!(
            waiting, may_wait,
            "panels waiting for their series, {store} store"
        );
    }
}

/// `promtool check rules` accepts the alerts, and the dashboard's queries as recording
/// rules (Grafana's `$__rate_interval` and `$instance` filled in as Grafana would), and
/// `promtool test rules` fires each alert on the series that should fire it, not before its
/// `for` (scripts/test installs Debian's `prometheus` for promtool).
#[test]
fn promtool_checks_the_alerts_and_the_dashboard_queries_and_tests_the_alerts() {
    let probe = Command::new("promtool").arg("--version").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: promtool is not installed (scripts/test installs `prometheus`)");
        return;
    }
    let dashboard: Value =
        serde_json::from_str(&read("deploy/grafana/ratewarden.json")).expect("JSON");
    let mut queries = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, target) in items(&dashboard["panels"])
        .iter()
        .flat_map(|p| items(&p["targets"]))
        .enumerate()
    {
        let expr = text(&target["expr"])
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*");
        let expr = serde_json::to_string(&expr).unwrap();
        queries.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {expr}\n"
        ));
    }
    let dir = scratch("promtool");
    std::fs::write(dir.join("dashboard.yml"), queries).unwrap();
    let rules = root().join("deploy/prometheus");
    let dashboard_rules = dir.join("dashboard.yml").display().to_string();
    for args in [
        ["check", "rules", "alerts.yml"],
        ["check", "rules", dashboard_rules.as_str()],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&rules)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
