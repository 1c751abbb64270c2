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

/// Tries at starting a server before a test gives up on free ports.
const ATTEMPTS: usize = 20;

/// A port free a moment ago whose cluster bus port (`+ 10000`) was free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        let bus = port.checked_add(10_000);
        if bus.is_some_and(|bus| TcpListener::bind(("127.0.0.1", bus)).is_ok()) {
            return port;
        }
    }
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
        let cluster = extra.contains(&"--cluster-enabled");
        let ports = move || {
            if cluster {
                free_cluster_port()
            } else {
                free_port()
            }
        };
        Self::start_anywhere(ports, |_| extra.iter().map(|&a| a.to_owned()).collect())
    }

    /// On a free port (and a free cluster bus port, `port + 10000`, for a cluster node),
    /// with the arguments `extra` gives for that port. A port is free only until someone
    /// takes it: tests in parallel, and other processes on the machine, start servers too,
    /// so a port lost in between is retried on another rather than failing the test.
    fn start_anywhere(mut ports: impl FnMut() -> u16, extra: impl Fn(u16) -> Vec<String>) -> Self {
        let mut lost = Vec::new();
        for _ in 0..ATTEMPTS {
            let port = ports();
            let args = extra(port);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            match Self::try_start_on(port, &args) {
                Ok(server) => return server,
                Err(log) if log.contains("in use") => lost.push(port),
                Err(log) => panic!("redis-server on port {port} did not start; its log:\n{log}"),
            }
        }
        panic!("redis-server found no free port in {ATTEMPTS} tries: {lost:?} were taken");
    }

    /// On `port` (a restart keeps its port).
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        Self::try_start_on(port, extra).unwrap_or_else(|log| {
            panic!("redis-server on port {port} did not start; its log:\n{log}")
        })
    }

    /// On `port`, or its log when it did not start.
    fn try_start_on(port: u16, extra: &[&str]) -> Result<Self, String> {
        Self::try_spawn(port, None, extra)
    }

    /// On `port`, as a Sentinel when `sentinel` holds its configuration file's lines (Sentinel
    /// needs a file it can rewrite), or its log when it did not start.
    fn try_spawn(port: u16, sentinel: Option<&str>, extra: &[&str]) -> Result<Self, String> {
        let dir =
            std::env::temp_dir().join(format!("ratewarden-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let mut command = Command::new(redis_server());
        if let Some(config) = sentinel {
            let file = dir.join("sentinel.conf");
            std::fs::write(&file, config).expect("the Sentinel's configuration is written");
            command.arg(&file).arg("--sentinel");
        } else {
            command.args(["--save", "", "--appendonly", "no"]);
        }
        let mut child = command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        // Ready when its log says so: read, never sleep. A Sentinel says so by naming the
        // master it monitors.
        let marker = if sentinel.is_some() {
            "+monitor master"
        } else {
            "Ready to accept connections"
        };
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let mut log = Vec::new();
        let ready = lines.by_ref().take(500).map_while(Result::ok).any(|line| {
            let ready = line.contains(marker);
            log.push(line);
            ready
        });
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let server = Self { port, child, dir };
        if ready {
            Ok(server)
        } else {
            // Dropping the server kills what is left of it and removes its directory.
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
        Self::start_with_node_timeout(replicas, Duration::from_secs(2))
    }

    /// Three masters with `replicas` replicas each, a node unreachable for `node_timeout`
    /// taken as failed (its replica then promoted).
    pub fn start_with_node_timeout(replicas: usize, node_timeout: Duration) -> Self {
        let node_timeout = node_timeout.as_millis().to_string();
        let nodes: Vec<Server> = (0..3 * (1 + replicas))
            .map(|_| {
                Server::start_anywhere(free_cluster_port, |port| {
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &format!("nodes-{port}.conf"),
                        "--cluster-node-timeout",
                        &node_timeout,
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

/// A master, one replica, and three Sentinels watching them under [`Sentinels::MASTER`],
/// quorum two, with short timeouts so that a failover takes about a second.
pub struct Sentinels {
    /// The master when started (index 0) and its replica (index 1).
    pub servers: Vec<Server>,
    /// The three Sentinels.
    pub sentinels: Vec<Server>,
    /// The way to the master, when it was started behind one
    /// ([`Sentinels::start_behind_link`]).
    pub link: Option<Link>,
}

/// A TCP relay in front of a master that can lose its replication stream: what a network
/// does to a replica's link under a partition, or what a master's unsent output buffer
/// is when it dies. Every connection is relayed both ways; once [`Link::freeze`] is called,
/// what the master sends on a replica's connection (one that asked `PSYNC`) is read and
/// dropped, so the replica keeps an open link that brings it nothing, and acknowledges
/// (`REPLCONF ACK`, relayed) only what it had. A master killed then dies with writes no
/// replica holds, exactly those made after the freeze.
pub struct Link {
    /// Its port on 127.0.0.1: the master's address as the Sentinels and the replica know it.
    pub port: u16,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Link {
    /// Relays connections on a free port to `target`'s port.
    fn start(target: u16) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port for the link");
        let port = listener.local_addr().expect("its address").port();
        let frozen = Arc::new(AtomicBool::new(false));
        let shared = Arc::clone(&frozen);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                // A master gone refuses: the relay closes the client's connection at once, as
                // a dead host's would be.
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let replication = Arc::new(AtomicBool::new(false));
                let (c, s) = (client.try_clone(), server.try_clone());
                let (Ok(client_reader), Ok(server_reader)) = (c, s) else {
                    continue;
                };
                let seen = Arc::clone(&replication);
                let mut to_server = server;
                std::thread::spawn(move || {
                    relay(client_reader, &mut to_server, |bytes| {
                        if bytes.windows(5).any(|w| w == b"PSYNC") {
                            seen.store(true, Ordering::Release);
                        }
                        true
                    });
                });
                let frozen = Arc::clone(&shared);
                let mut to_client = client;
                std::thread::spawn(move || {
                    relay(server_reader, &mut to_client, |_| {
                        !(frozen.load(Ordering::Acquire) && replication.load(Ordering::Acquire))
                    });
                });
            }
        });
        Self { port, frozen }
    }

    /// From now on the master's replication stream is lost on the way.
    pub fn freeze(&self) {
        self.frozen
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Copies `from` to `to` until either closes, each read passed on only if `pass` says so;
/// both directions are shut down at the end, as a dropped connection is.
fn relay(
    mut from: std::net::TcpStream,
    to: &mut std::net::TcpStream,
    mut pass: impl FnMut(&[u8]) -> bool,
) {
    use std::io::{Read, Write};
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if pass(&buffer[..n]) && to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// A TCP relay in front of a server that drops the first connection carrying a batch
/// (a store's coalesced calls, `FCALL ... batch ...`) once the server has run it: the
/// server's reply is read and thrown away, and both sides are closed, as a connection lost
/// between a command's execution and its reply is. Later connections are relayed as they are.
pub struct Cut {
    /// Its port on 127.0.0.1, in front of the server's.
    pub port: u16,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Cut {
    /// Relays connections on a free port to `target`'s port.
    pub fn start(target: u16) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port for the relay");
        let port = listener.local_addr().expect("its address").port();
        let done = Arc::new(AtomicBool::new(false));
        let cut_done = Arc::clone(&done);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (Ok(client_reader), Ok(server_reader), Ok(client_end), Ok(server_end)) = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                ) else {
                    continue;
                };
                // Armed when this connection carried a batch to the server, before the server
                // can have answered it.
                let armed = Arc::new(AtomicBool::new(false));
                let (arm, done) = (Arc::clone(&armed), Arc::clone(&cut_done));
                let mut to_server = server;
                std::thread::spawn(move || {
                    relay(client_reader, &mut to_server, |bytes| {
                        let batch = bytes.windows(11).any(|w| w == b"$5\r\nbatch\r\n");
                        if batch && !done.load(Ordering::Acquire) {
                            arm.store(true, Ordering::Release);
                        }
                        true
                    });
                });
                let done = Arc::clone(&cut_done);
                let mut to_client = client;
                std::thread::spawn(move || {
                    relay(server_reader, &mut to_client, |_| {
                        if !armed.load(Ordering::Acquire) || done.swap(true, Ordering::AcqRel) {
                            return true;
                        }
                        // The batch's reply: lost, and the connection with it.
                        let _ = client_end.shutdown(std::net::Shutdown::Both);
                        let _ = server_end.shutdown(std::net::Shutdown::Both);
                        false
                    });
                });
            }
        });
        Self { port, done }
    }

    /// `redis://127.0.0.1:PORT` of the relay.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether a batch's connection was cut.
    pub fn cut(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// A wide-area link to a server: a TCP relay that delivers every byte a fixed time after it
/// was sent, each way (so a round trip takes twice `one_way`, and throughput is not
/// limited), and that can be partitioned: while it is, whatever is sent either way is
/// lost, and a new connection is accepted but reaches nothing. A connection that lived
/// through a partition is closed when the partition heals (its stream lost bytes).
pub struct Wan {
    /// Its port on 127.0.0.1, in front of the server's.
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Wan {
    /// Relays connections on a free port to `target`'s port, `one_way` late each way.
    pub fn start(target: u16, one_way: Duration) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port for the relay");
        let port = listener.local_addr().expect("its address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let shared = Arc::clone(&cut);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let _ = client.set_nodelay(true);
                if shared.load(Ordering::Acquire) {
                    // Reaches nothing: held open until the partition heals, then closed.
                    let cut = Arc::clone(&shared);
                    std::thread::spawn(move || {
                        while cut.load(Ordering::Acquire) {
                            // Waits on the test's switch, not on a refill.
                            #[allow(clippy::disallowed_methods)]
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        let _ = client.shutdown(std::net::Shutdown::Both);
                    });
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = server.set_nodelay(true);
                let (Ok(client_reader), Ok(server_reader)) =
                    (client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                let lived_through = Arc::new(AtomicBool::new(false));
                for (from, to) in [(client_reader, server), (server_reader, client)] {
                    let (cut, tainted) = (Arc::clone(&shared), Arc::clone(&lived_through));
                    std::thread::spawn(move || late(from, to, one_way, &cut, &tainted));
                }
            }
        });
        Self { port, cut }
    }

    /// `redis://127.0.0.1:PORT` of the relay.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Partitions the link (`true`) or heals it (`false`).
    pub fn partition(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::Release);
    }
}

/// Copies `from` to `to`, each read written `one_way` after it was read, and lost while
/// `cut` is set; once a connection has lost bytes (`tainted`), it is closed when the cut
/// heals. The delay is the network's, on the wall clock: what it delays is real sockets
/// between real processes, whose own clocks are the wall's.
#[allow(clippy::disallowed_methods)]
fn late(
    mut from: std::net::TcpStream,
    to: std::net::TcpStream,
    one_way: Duration,
    cut: &std::sync::atomic::AtomicBool,
    tainted: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let (queue, due) = std::sync::mpsc::channel::<(std::time::Instant, Vec<u8>)>();
    let mut writer = to.try_clone().expect("a second handle");
    let sender = std::thread::spawn(move || {
        for (at, bytes) in due {
            if let Some(wait) = at.checked_duration_since(std::time::Instant::now()) {
                std::thread::sleep(wait);
            }
            if writer.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = writer.shutdown(std::net::Shutdown::Both);
    });
    // Reads wake now and then, so that a healed cut closes a tainted connection that is
    // quiet.
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buffer = [0u8; 16 * 1024];
    loop {
        if cut.load(Ordering::Acquire) {
            tainted.store(true, Ordering::Release);
        } else if tainted.load(Ordering::Acquire) {
            break;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if cut.load(Ordering::Acquire) {
                    tainted.store(true, Ordering::Release);
                    continue;
                }
                let at = std::time::Instant::now() + one_way;
                if queue.send((at, buffer[..n].to_vec())).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    drop(queue);
    let _ = sender.join();
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

impl Sentinels {
    /// The name the Sentinels monitor the master under.
    pub const MASTER: &'static str = "mymaster";

    /// Starts the master, its replica (synced before this returns) and three Sentinels that
    /// call the master down after `down_after` without an answer.
    pub fn start(down_after: Duration) -> Self {
        Self::start_with(down_after, false)
    }

    /// [`Sentinels::start`] with the master behind a [`Link`] (in [`Sentinels::link`]) that
    /// can lose the replica's stream: the Sentinels, the replica and the store know the
    /// master by the link's address.
    pub fn start_behind_link(down_after: Duration) -> Self {
        Self::start_with(down_after, true)
    }

    fn start_with(down_after: Duration, behind_link: bool) -> Self {
        // A replica's first sync at once, not after the default 5 s wait for more replicas:
        // after a failover, the old master and new replicas sync from the promoted one.
        let at_once = ["--repl-diskless-sync-delay", "0"];
        let master = Server::start_with(&at_once);
        let link = behind_link.then(|| Link::start(master.port));
        let master_port = link.as_ref().map_or(master.port, |l| l.port);
        let replica = Server::start_with(&[
            at_once[0],
            at_once[1],
            "--replicaof",
            "127.0.0.1",
            &master_port.to_string(),
        ]);
        wait_until("the replica synced", || {
            replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")
        });
        let config = format!(
            "sentinel monitor {name} 127.0.0.1 {port} 2\n\
             sentinel down-after-milliseconds {name} {down}\n\
             sentinel failover-timeout {name} {failover}\n\
             sentinel parallel-syncs {name} 1\n",
            name = Self::MASTER,
            port = master_port,
            down = down_after.as_millis(),
            // A split vote among the Sentinels is retried after twice this: short, so that a
            // test's failover rarely takes more than a few seconds.
            failover = (down_after * 2).as_millis(),
        );
        let sentinels: Vec<Server> = (0..3)
            .map(|_| {
                let config = config.clone();
                let mut lost = Vec::new();
                for _ in 0..ATTEMPTS {
                    let port = free_port();
                    match Server::try_spawn(port, Some(&config), &[]) {
                        Ok(sentinel) => return sentinel,
                        Err(log) if log.contains("in use") => lost.push(port),
                        Err(log) => panic!("a Sentinel on port {port} did not start:\n{log}"),
                    }
                }
                panic!("a Sentinel found no free port in {ATTEMPTS} tries: {lost:?}");
            })
            .collect();
        // Ready when every Sentinel knows the others and the replica: a failover needs both.
        for sentinel in &sentinels {
            wait_until("the Sentinels found each other and the replica", || {
                let master = sentinel.cli(&["SENTINEL", "MASTER", Self::MASTER]);
                let field = |name: &str| {
                    let mut lines = master.lines();
                    lines.find(|l| *l == name)?;
                    lines.next()?.parse::<u32>().ok()
                };
                field("num-other-sentinels") == Some(2) && field("num-slaves") == Some(1)
            });
        }
        Self {
            servers: vec![master, replica],
            sentinels,
            link,
        }
    }

    /// Every Sentinel's URL.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::url).collect()
    }

    /// The port of the master the (first answering) Sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = s.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::MASTER]);
            reply.lines().nth(1)?.trim().parse().ok()
        })
    }

    /// Waits until the replica (index 1) has applied everything the master (index 0) had
    /// written when this was called.
    pub fn wait_for_replica(&self) {
        let offset = |server: &Server| -> Option<u64> {
            let info = server.cli(&["INFO", "replication"]);
            let line = info
                .lines()
                .find(|l| l.starts_with("master_repl_offset:"))?;
            line.split_once(':')?.1.trim().parse().ok()
        };
        let written = offset(&self.servers[0]).expect("the master's replication offset");
        wait_until("the replica caught up", || {
            offset(&self.servers[1]).is_some_and(|applied| applied >= written)
        });
    }

    /// The server on `port`.
    pub fn server(&self, port: u16) -> &Server {
        self.servers
            .iter()
            .find(|s| s.port == port)
            .expect("one of the group's servers")
    }
}

/// Polls `done` every 10 ms for up to 20 s (a fixture coming up; never a refill).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what}: not within 20 s");
}

/// A Redis Function making only the three calls every decision makes (`TIME`, then `GET`
/// and `SET` of its key) and nothing else: the floor the store's figures are measured
/// against (`benches/store.rs`, `examples/bench.rs --floor`, and the CPU table of
/// `scripts/bench-redis`). Its function is `ratewarden_floor`, called with one key.
pub const FLOOR_LIBRARY: &str = "#!lua name=ratewarden_floor
redis.register_function('ratewarden_floor', function(keys, args)
  local t = redis.call('TIME')
  local v = redis.call('GET', keys[1])
  redis.call('SET', keys[1], t[1] .. ',' .. t[2], 'PX', 60000)
  return {t[1], v or ''}
end)
";

/// A bare redis-rs connection to `url`, made as the store makes its own (a connection
/// manager with no response timeout of its own), with [`FLOOR_LIBRARY`] loaded: the peer a
/// store's call is measured beside.
///
/// # Errors
///
/// Redis's, connecting or loading the library.
pub async fn floor(url: &str) -> Result<redis::aio::ConnectionManager, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(None);
    let mut connection = redis::aio::ConnectionManager::new_with_config(client, config).await?;
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(FLOOR_LIBRARY)
        .query_async::<redis::Value>(&mut connection)
        .await?;
    Ok(connection)
}

/// One call of the floor's function for `key` on `connection`.
///
/// # Errors
///
/// Redis's.
pub async fn floor_call(
    connection: &redis::aio::ConnectionManager,
    key: &str,
) -> Result<(), redis::RedisError> {
    redis::cmd("FCALL")
        .arg("ratewarden_floor")
        .arg(1)
        .arg(key)
        .query_async::<redis::Value>(&mut connection.clone())
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store tests' occasional "redis-server on port N did not start": the port was
    /// free when picked and taken before the server bound it.
    #[test]
    fn a_port_taken_before_the_server_binds_it_is_retried_on_another() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let mut first = true;
        let ports = || {
            if std::mem::take(&mut first) {
                port
            } else {
                free_port()
            }
        };
        let server = Server::start_anywhere(ports, |_| Vec::new());
        assert_ne!(server.port, port);
        assert_eq!(server.cli(&["PING"]), "PONG");
    }
}
