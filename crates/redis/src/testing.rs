//! Real `redis-server` processes for tests (feature `testing`): started on free loopback
//! ports, stopped (killed) when dropped. Used by this crate's tests and the server's.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A redis-server of this test's own.
pub struct Server {
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

/// A port free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}

fn redis_server() -> &'static str {
    if Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        panic!(
            "redis-server is not installed: these tests start their own Redis; \
             `scripts/test` installs it (apt-get install -y redis-server)"
        );
    }
    "redis-server"
}

impl Server {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// With extra `redis-server` arguments (such as `--cluster-enabled yes`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_free(|_| extra.iter().map(|&a| a.to_owned()).collect())
    }

    /// On a free port, with the arguments `extra` gives for it. A port found free can be
    /// taken by another test before redis-server binds it: then another port is tried.
    fn start_free(extra: impl Fn(u16) -> Vec<String>) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let args = extra(port);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            match Self::try_start_on(port, &args) {
                Ok(server) => return server,
                Err(log) if log.contains("Address already in use") => continue,
                Err(log) => panic!("redis-server on port {port} did not start; its log:\n{log}"),
            }
        }
        panic!("redis-server found every free port taken, five times over");
    }

    /// On `port` (a restart keeps its port).
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        Self::try_start_on(port, extra).unwrap_or_else(|log| {
            panic!("redis-server on port {port} did not start; its log:\n{log}")
        })
    }

    /// On `port`, or its log when it did not come up.
    fn try_start_on(port: u16, extra: &[&str]) -> Result<Self, String> {
        let dir =
            std::env::temp_dir().join(format!("ratewarden-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let mut child = Command::new(redis_server())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        // Ready when its log says so: read, never sleep.
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let mut log = Vec::new();
        let ready = lines.by_ref().take(500).map_while(Result::ok).any(|line| {
            let ready = line.contains("Ready to accept connections");
            log.push(line);
            ready
        });
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let server = Self { port, child, dir };
        if ready {
            Ok(server)
        } else {
            // Dropping the server stops what is left of it.
            Err(log.join("\n"))
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Runs `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Sends a signal (`STOP`, `CONT`, `KILL`) to the server process.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters on free ports.
pub struct Cluster {
    /// Every node, masters and replicas.
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Starts three masters and joins them with `redis-cli --cluster create`.
    pub fn start() -> Self {
        Self::start_with(0)
    }

    /// Three masters with `replicas` replicas each.
    pub fn start_with(replicas: usize) -> Self {
        let nodes: Vec<Server> = (0..3 * (1 + replicas))
            .map(|_| {
                Server::start_free(|port| {
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &format!("nodes-{port}.conf"),
                        "--cluster-node-timeout",
                        "2000",
                    ]
                    .map(str::to_owned)
                    .to_vec()
                })
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = std::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for node in &nodes {
            let mut ok = false;
            for _ in 0..500 {
                if node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                    ok = true;
                    break;
                }
                #[allow(clippy::disallowed_methods)]
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(ok, "the cluster came up");
        }
        Self { nodes }
    }

    /// The node that is a master and holds `key` now.
    pub fn master_of(&self, key: &str) -> Option<&Server> {
        self.nodes
            .iter()
            .find(|n| n.cli(&["ROLE"]).starts_with("master") && n.cli(&["EXISTS", key]) == "1")
    }

    /// Every node's URL, for the cluster client's seeds.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }
}

#[cfg(test)]
mod tests {
    /// What `start_free` retries on: a port found free and taken before redis-server bound
    /// it comes back as a log saying so, not as a hang or a panic.
    #[test]
    fn a_port_taken_before_redis_binds_it_is_reported_as_taken() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let Err(log) = super::Server::try_start_on(port, &[]) else {
            panic!("redis-server started on a taken port");
        };
        assert!(log.contains("Address already in use"), "{log}");
    }
}
