//! Helpers shared by the tests that start real `turnstile serve` processes.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

pub mod replica;

/// A running `turnstile serve`.
pub struct Service {
    pub child: Child,
    pub addr: String,
    /// The admin key (first start only).
    pub admin_key: Option<String>,
}

/// A test that fails (panics) still stops its service: a `turnstile serve` left running would
/// keep the test's output pipe open and hang a piped `cargo test`.
impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(data: &Path, config: &Path, first: bool) -> Service {
    start_with(data, config, first, &[])
}

/// `turnstile serve` with extra arguments (e.g. `--redis-url`).
pub fn start_with(data: &Path, config: &Path, first: bool, extra: &[&str]) -> Service {
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .arg("--config")
        .arg(config)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut addr = None;
    let mut admin_key = None;
    // The banner: the address, then (first start only) the admin key.
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("turnstile serve: listening on http://") {
            addr = Some(rest.trim().to_owned());
            if !first {
                break;
            }
        } else if let Some(rest) = line.trim().strip_prefix("admin key:") {
            admin_key = Some(rest.trim().to_owned());
            break;
        }
    }
    // Keep reading stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Service {
        child,
        addr: addr.expect("the service listens"),
        admin_key,
    }
}

/// One HTTP/1.1 request on a fresh connection; `None` when the service cannot be reached or
/// the connection fails before an answer (it was killed).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    key: &str,
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .ok()?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// What the replicas of one Redis (by port and PID) share in a test: keys and profiles are
/// shared through Redis, so the first replica on a Redis creates them and the later ones adopt
/// them (docs/replicas.md, "Shared keys, profiles and audit").
pub struct PerRedis<T>(Mutex<Vec<((u16, u32), T)>>);

impl<T: Clone> PerRedis<T> {
    pub const fn new() -> Self {
        PerRedis(Mutex::new(Vec::new()))
    }

    /// What the first replica on this Redis recorded, if one did.
    pub fn get(&self, redis: (u16, u32)) -> Option<T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .find(|(d, _)| *d == redis)
            .map(|(_, value)| value.clone())
    }

    pub fn insert(&self, redis: (u16, u32), value: T) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((redis, value));
    }
}

/// One replica scenario at a time within a test binary: each starts a Redis (`redis-server`, or
/// the binary `TURNSTILE_TEST_REDIS_SERVER` names, e.g. `valkey-server`) and its replicas, and
/// side by side on two cores their Redis calls pass a 100 ms timeout, which is the declared
/// degraded mode (correct behaviour, but not what these tests look at).
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
