//! A real `redis-server` for tests: started on a free loopback port with no persistence,
//! stopped by its PID (SIGKILL on drop). Shared by this crate's tests and the CLI's
//! multi-replica tests. A missing `redis-server` is an error (never a skip): `.ci/run`
//! installs it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    child: Child,
    port: u16,
}

/// Why a test Redis could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    #[error(
        "redis-server could not be started (is it installed? `apt-get install redis-server`): {0}"
    )]
    Spawn(std::io::Error),
    #[error("redis-server did not accept connections within 5 s")]
    NotReady,
    #[error("no free port: {0}")]
    Port(std::io::Error),
}

fn free_port() -> Result<u16, RedisServerError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(RedisServerError::Port)?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(RedisServerError::Port)
}

fn spawn(port: u16) -> Result<Child, RedisServerError> {
    Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(RedisServerError::Spawn)
}

fn wait_ready(port: u16) -> Result<(), RedisServerError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(RedisServerError::NotReady)
}

impl RedisServer {
    /// Starts a fresh server (empty state) on a free port.
    pub fn start() -> Result<Self, RedisServerError> {
        let port = free_port()?;
        let child = spawn(port)?;
        wait_ready(port)?;
        Ok(RedisServer { child, port })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the server's PID.
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status();
    }

    /// SIGKILLs the server and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server and starts a new one, empty, on the same port.
    pub fn restart_empty(&mut self) -> Result<(), RedisServerError> {
        self.kill();
        self.child = spawn(self.port)?;
        wait_ready(self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.signal("CONT");
        self.kill();
    }
}
