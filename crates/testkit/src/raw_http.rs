//! HTTP/1.1 by hand over a fresh loopback [`TcpStream`]: for processes whose death a test
//! provokes (a request to a killed service answers `None`, not a client error), for the
//! `/metrics` text and for the fake upstream's scripted headers.
//!
//! Invariants: every request carries `Connection: close` and is read to the end; nothing is
//! retried here (a test that retries says so itself).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

/// One request (`head`, ending in the empty line, then `body`) on a fresh connection to
/// `addr`: the whole answer as text, or `None` when the connection fails before it ends.
pub fn exchange(addr: &str, head: &str, body: &str, read_timeout: Duration) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(read_timeout)).ok()?;
    stream.write_all(format!("{head}{body}").as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    Some(String::from_utf8_lossy(&response).into_owned())
}

/// One JSON call to a turnstile service with `key` as the bearer: its status and JSON answer
/// (`Null` when the body is not JSON); `None` when the service cannot be reached or the
/// connection fails before an answer (it was killed).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    key: &str,
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let text = exchange(addr, &head, &body, Duration::from_secs(20))?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// `GET path` without a key: the whole answer (status line, headers, body); panics when
/// `addr` does not answer.
pub fn get_text(addr: &str, path: &str) -> String {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    exchange(addr, &head, "", Duration::from_secs(30))
        .unwrap_or_else(|| panic!("GET {path} on {addr} answers"))
}

/// `POST path` with a JSON `body` and the extra `headers`: the whole answer; panics when `addr`
/// does not answer.
pub fn post_text(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{extra}\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    exchange(addr, &head, body, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("POST {path} on {addr} answers"))
}
