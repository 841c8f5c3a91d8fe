//! A real Redis-protocol server for tests: started on a free loopback port with no
//! persistence, stopped by its PID (SIGKILL on drop). A missing server is an error (never a
//! skip): `.ci/run` installs it.
//!
//! Invariant: a [`RedisServer`] that exists answers `INFO server` as the implementation its
//! binary's name asks for (checked at every start and restart).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::info::{info_server, ServerInfo, ServerKind};

/// The environment variable naming the server binary the tests start (default
/// [`DEFAULT_SERVER`]).
pub const SERVER_ENV: &str = "TURNSTILE_TEST_REDIS_SERVER";

/// The server binary the tests start when [`SERVER_ENV`] is unset or empty.
pub const DEFAULT_SERVER: &str = "redis-server";

/// The server binary the tests start: [`SERVER_ENV`], or [`DEFAULT_SERVER`].
pub fn server_binary() -> String {
    match std::env::var(SERVER_ENV) {
        Ok(binary) if !binary.trim().is_empty() => binary.trim().to_owned(),
        _ => DEFAULT_SERVER.to_owned(),
    }
}

/// A running `redis-server` (or the binary [`SERVER_ENV`] names).
pub struct RedisServer {
    child: Child,
    port: u16,
    binary: String,
    info: ServerInfo,
    /// Arguments after the common ones (a cluster node's), kept for a restart.
    extra: Vec<String>,
}

/// Why a test server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    #[error(
        "{binary} could not be started (is it installed? `apt-get install redis-server`, or \
         `apt-get install -t bookworm-backports valkey-server`; {SERVER_ENV} names the binary): \
         {source}"
    )]
    /// The binary could not be started.
    Spawn {
        /// The binary.
        binary: String,
        /// Why.
        source: std::io::Error,
    },
    /// The server did not answer in time.
    #[error("{binary} did not answer `INFO server` within 5 s (last: {last})")]
    NotReady {
        /// The binary.
        binary: String,
        /// The last failure.
        last: String,
    },
    #[error(
        "{binary} runs {found}, not {expected}: {SERVER_ENV} asked for {expected} and would \
         test the wrong server"
    )]
    /// The binary runs the other implementation than its name asks for.
    WrongServer {
        /// The binary.
        binary: String,
        /// What its name asks for.
        expected: ServerKind,
        /// What answered.
        found: ServerInfo,
    },
    /// No loopback port was free.
    #[error("no free port: {0}")]
    Port(std::io::Error),
    /// The cluster could not be formed.
    #[error("the cluster could not be formed: {0}")]
    Cluster(String),
}

pub(crate) fn free_port() -> Result<u16, RedisServerError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(RedisServerError::Port)?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(RedisServerError::Port)
}

fn spawn(binary: &str, port: u16, extra: &[String]) -> Result<Child, RedisServerError> {
    Command::new(binary)
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
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| RedisServerError::Spawn {
            binary: binary.to_owned(),
            source,
        })
}

/// Waits until the server answers `INFO server`, then checks it is the implementation the
/// binary's name asks for.
fn wait_ready(binary: &str, port: u16) -> Result<ServerInfo, RedisServerError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        match info_server(port) {
            Ok(text) => match ServerInfo::parse(&text) {
                Some(info) => {
                    let expected = ServerKind::expected_for(binary);
                    if info.kind != expected {
                        return Err(RedisServerError::WrongServer {
                            binary: binary.to_owned(),
                            expected,
                            found: info,
                        });
                    }
                    return Ok(info);
                }
                None => last = format!("unrecognised INFO server: {text:?}"),
            },
            Err(error) => last = error.to_string(),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(RedisServerError::NotReady {
        binary: binary.to_owned(),
        last,
    })
}

impl RedisServer {
    /// Starts a fresh server (empty state) on a free port: the binary [`server_binary`] names.
    pub fn start() -> Result<Self, RedisServerError> {
        Self::start_binary(&server_binary())
    }

    /// Starts a fresh server (empty state) on a free port from `binary` (`redis-server`,
    /// `valkey-server` or a path).
    pub fn start_binary(binary: &str) -> Result<Self, RedisServerError> {
        Self::start_with(binary, free_port()?, Vec::new())
    }

    pub(crate) fn start_with(
        binary: &str,
        port: u16,
        extra: Vec<String>,
    ) -> Result<Self, RedisServerError> {
        let mut child = spawn(binary, port, &extra)?;
        match wait_ready(binary, port) {
            Ok(info) => Ok(RedisServer {
                child,
                port,
                binary: binary.to_owned(),
                info,
                extra,
            }),
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(error)
            }
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis-cli ARGS…` against this server (installed with `redis-server`; it speaks to
    /// Valkey too): its trimmed standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (installed with redis-server)");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The binary this server was started from.
    pub fn binary(&self) -> &str {
        &self.binary
    }

    /// What the server said about itself when it started (`INFO server`).
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// Asks the running server `INFO server` now.
    pub fn query_info(&self) -> Result<ServerInfo, RedisServerError> {
        let text = info_server(self.port).map_err(|error| RedisServerError::NotReady {
            binary: self.binary.clone(),
            last: error.to_string(),
        })?;
        ServerInfo::parse(&text).ok_or_else(|| RedisServerError::NotReady {
            binary: self.binary.clone(),
            last: format!("unrecognised INFO server: {text:?}"),
        })
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
        self.child = spawn(&self.binary, self.port, &self.extra)?;
        self.info = wait_ready(&self.binary, self.port)?;
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.signal("CONT");
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_that_cannot_be_started_is_a_typed_error_naming_it() {
        let error = match RedisServer::start_binary("turnstile-no-such-redis-server") {
            Err(error) => error,
            Ok(_) => panic!("a missing binary must not start"),
        };
        assert!(matches!(error, RedisServerError::Spawn { .. }), "{error}");
        assert!(
            error.to_string().contains("turnstile-no-such-redis-server"),
            "{error}"
        );
    }
}
