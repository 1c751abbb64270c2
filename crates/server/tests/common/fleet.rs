//! Three `ratewarden serve` processes on one Redis, and a drive of `/v1/check` calls spread
//! over them as hard as the callers go.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The servers, killed when dropped.
pub struct Fleet {
    pub servers: Vec<std::process::Child>,
    pub listen: Vec<SocketAddr>,
    pub admin: Vec<SocketAddr>,
    pub dir: std::path::PathBuf,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        // `RATEWARDEN_KEEP_LOGS=1` keeps the servers' configs and logs, to see why.
        if std::env::var_os("RATEWARDEN_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts three servers, each on the config `config(listen, admin)` makes for its ports,
/// and waits until every one is ready. `name` names the folder of their configs and logs.
pub async fn start(name: &str, config: impl Fn(u16, u16) -> String) -> Fleet {
    let dir = std::env::temp_dir().join(format!("ratewarden-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut fleet = Fleet {
        servers: Vec::new(),
        listen: Vec::new(),
        admin: Vec::new(),
        dir: dir.clone(),
    };
    for i in 0..3 {
        let (listen, admin) = (free_port(), free_port());
        let path = dir.join(format!("server{i}.toml"));
        std::fs::write(&path, config(listen, admin)).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_ratewarden"))
            .args(["serve", "--config"])
            .arg(&path)
            .stderr(std::fs::File::create(dir.join(format!("server{i}.log"))).unwrap())
            .spawn()
            .unwrap();
        fleet.servers.push(child);
        fleet.listen.push(([127, 0, 0, 1], listen).into());
        fleet.admin.push(([127, 0, 0, 1], admin).into());
    }
    for admin in fleet.admin.clone() {
        assert!(
            super::eventually(|| super::is_ready(admin)).await,
            "a server did not come up; logs in {}",
            dir.display()
        );
    }
    fleet
}

/// What a drive did: admitted per server, answered in all, and how long it took.
pub struct Driven {
    pub admitted: Vec<u64>,
    pub answered: u64,
    pub elapsed: Duration,
}

impl Driven {
    /// Admitted by the whole fleet.
    pub fn total(&self) -> u64 {
        self.admitted.iter().sum()
    }
}

/// Posts `body` to every server's `/v1/check` from `callers` loops (spread over the
/// servers in turn), each sending its next call when the last is answered, for `span`.
pub async fn drive(fleet: &Fleet, callers: usize, span: Duration, body: &'static [u8]) -> Driven {
    let servers = fleet.listen.len();
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..servers).map(|_| AtomicU64::new(0)).collect());
    let answered = Arc::new(AtomicU64::new(0));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let server = c % servers;
        let addr = fleet.listen[server];
        let (admitted, answered) = (Arc::clone(&admitted), Arc::clone(&answered));
        tasks.push(tokio::spawn(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            while start.elapsed() < span {
                let request = Request::post(format!("http://{addr}/v1/check"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(body)))
                    .unwrap();
                let Ok(response) = client.request(request).await else {
                    continue;
                };
                let body = response.into_body().collect().await.unwrap().to_bytes();
                let d: serde_json::Value = serde_json::from_slice(&body).unwrap();
                answered.fetch_add(1, Ordering::Relaxed);
                if d["allowed"] == true {
                    admitted[server].fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Driven {
        admitted: admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect(),
        answered: answered.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
    }
}
