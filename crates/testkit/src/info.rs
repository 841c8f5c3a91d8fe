//! Which server answers: `INFO server` read over one plain RESP exchange (no client library:
//! it also runs before the server is up), parsed into a [`ServerInfo`], and the
//! implementation a binary's name asks for ([`ServerKind::expected_for`]).
//!
//! Invariant: a binary named `valkey…` must run Valkey (`server_name:valkey`) and any other
//! must run Redis; [`crate::RedisServer`] refuses a server that does not.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// Which server implementation answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// Redis.
    Redis,
    /// Valkey (`server_name:valkey`).
    Valkey,
}

impl ServerKind {
    /// The kind a binary's file name asks for: `valkey…` is Valkey, anything else Redis.
    pub fn expected_for(binary: &str) -> ServerKind {
        let name = Path::new(binary)
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or(binary);
        if name.to_ascii_lowercase().contains("valkey") {
            ServerKind::Valkey
        } else {
            ServerKind::Redis
        }
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServerKind::Redis => "Redis",
            ServerKind::Valkey => "Valkey",
        })
    }
}

/// What the running server says about itself (`INFO server`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// The implementation.
    pub kind: ServerKind,
    /// The implementation's own version: `valkey_version` on Valkey, `redis_version` on Redis.
    pub version: String,
    /// `redis_version` (Valkey reports the Redis version it is compatible with there).
    pub redis_version: String,
}

impl ServerInfo {
    /// Parses the text of `INFO server`. `server_name:valkey` (and `valkey_version`) mark
    /// Valkey; Redis has neither.
    pub fn parse(info: &str) -> Option<ServerInfo> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
                .map(str::to_owned)
        };
        let redis_version = field("redis_version")?;
        let valkey = field("server_name").is_some_and(|name| name == "valkey");
        match (valkey, field("valkey_version")) {
            (true, Some(version)) => Some(ServerInfo {
                kind: ServerKind::Valkey,
                version,
                redis_version,
            }),
            (true, None) => None,
            (false, _) => Some(ServerInfo {
                kind: ServerKind::Redis,
                version: redis_version.clone(),
                redis_version,
            }),
        }
    }
}

impl std::fmt::Display for ServerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            ServerKind::Redis => write!(f, "Redis {}", self.version),
            ServerKind::Valkey => write!(
                f,
                "Valkey {} (redis_version {})",
                self.version, self.redis_version
            ),
        }
    }
}

/// `INFO server` over one plain RESP exchange (no client library: this also runs before the
/// server is up).
pub(crate) fn info_server(port: u16) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        // A bulk string: `$<len>\r\n<payload>\r\n`; an error: `-…\r\n`.
        let text = String::from_utf8_lossy(&answer);
        if let Some(rest) = text.strip_prefix('$') {
            if let Some((len, payload)) = rest.split_once("\r\n") {
                let len: usize = len.parse().map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "bad bulk length")
                })?;
                if payload.len() >= len + 2 {
                    return Ok(payload[..len].to_owned());
                }
            }
        } else if text.ends_with("\r\n") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                text.trim_end().to_owned(),
            ));
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "connection closed before the answer",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_server_of_valkey_8_is_recognised_with_its_own_version() {
        let info = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
                    valkey_version:8.0.1\r\nredis_git_sha1:00000000\r\n";
        let parsed = ServerInfo::parse(info).expect("parsed");
        assert_eq!(parsed.kind, ServerKind::Valkey);
        assert_eq!(parsed.version, "8.0.1");
        assert_eq!(parsed.redis_version, "7.2.4");
    }

    #[test]
    fn info_server_of_redis_7_is_recognised_as_redis() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        let parsed = ServerInfo::parse(info).expect("parsed");
        assert_eq!(parsed.kind, ServerKind::Redis);
        assert_eq!(parsed.version, "7.0.15");
    }

    #[test]
    fn the_binary_name_decides_which_server_is_expected() {
        assert_eq!(
            ServerKind::expected_for("valkey-server"),
            ServerKind::Valkey
        );
        assert_eq!(
            ServerKind::expected_for("/usr/bin/valkey-server"),
            ServerKind::Valkey
        );
        assert_eq!(ServerKind::expected_for("redis-server"), ServerKind::Redis);
        assert_eq!(
            ServerKind::expected_for("/opt/redis/bin/redis-server"),
            ServerKind::Redis
        );
    }
}
