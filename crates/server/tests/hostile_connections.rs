//! Hostile clients cannot hold the service (issue 17): every phase of a connection has a
//! deadline, every client key and address a cap, and operators keep a reserved slice. Real
//! loopback sockets, bounded in count and in time.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use turnstile_testkit::TestServer;

/// The two floods run one at a time: on a small shared machine the unread-responses flood
/// takes the CPU the 100 ms probe measures.
static FLOODS: Mutex<()> = Mutex::new(());

fn cut(server: &TestServer, kind: &str) -> f64 {
    let text = server.metrics_text();
    let prefix = format!("turnstile_http_cuts_total{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap())
        .unwrap_or_else(|| panic!("no {kind} series in {text}"))
}

/// Sends a request head announcing a 1,000-byte JSON admission body and the first byte of it.
fn slow_body(addr: SocketAddr, key: &str) -> TcpStream {
    slow_body_with(addr, key, "{")
}

/// [`slow_body`] with `sent` as the start of the body.
fn slow_body_with(addr: SocketAddr, key: &str, sent: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /v1/admissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{sent}"
    )
    .unwrap();
    stream
}

/// Reads what the server sends until it closes (or `limit` passes). Returns the text and
/// whether the server closed.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), false)
}

/// One `GET /healthz` on a fresh connection; the time until the whole answer arrived.
fn probe_healthz(addr: SocketAddr) -> (Duration, String) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (text, _) = read_until_closed(&mut stream, Duration::from_secs(5));
    (started.elapsed(), text)
}

#[test]
fn healthz_answers_within_100ms_while_1100_slow_body_connections_are_open() {
    let _flood = FLOODS.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start_fresh(|c| {
        // The flood is one key from one address: lift those caps so it really fills the
        // general pool, and keep slow bodies alive for the whole test.
        c.http.max_connections_per_address = 4096;
        c.http.max_requests_per_key = 4096;
        c.admission.max_pending_per_key = 4096;
        c.http.body_min_bytes_per_sec = 1;
        c.http.body_read_timeout_ms = 60_000;
    });
    let (alice, _) = server.register_test_profile_with_keys();
    // 999 of 1,000 bytes: at 1 B/s minimum this body may take 1,000 s to finish.
    let almost = format!("{{{}", " ".repeat(998));
    let mut flood: Vec<TcpStream> = (0..1100)
        .map(|_| slow_body_with(server.addr, &alice, &almost))
        .collect();
    // The general pool (1,024) is full of slow bodies.
    let started = Instant::now();
    while server.metric("turnstile_http_connections_open") < 1024.0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "flood not accepted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut times = Vec::new();
    for _ in 0..5 {
        let (took, text) = probe_healthz(server.addr);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        times.push(took);
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("healthz probes while 1,100 slow bodies are open: {times:?}");
    assert!(
        times.iter().all(|t| *t < Duration::from_millis(100)),
        "healthz probes: {times:?}"
    );
    // The console page too (it carries no data; its API calls use the admin key).
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(b"GET /ui HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (text, _) = read_until_closed(&mut stream, Duration::from_secs(5));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    // Admin calls are served on the reserved slice too; a principal's are refused there.
    let snapshot = server.snapshot("t");
    assert!(snapshot["active"].is_u64(), "{snapshot}");
    assert!(server.metric("turnstile_http_connections_open") >= 1024.0);
    assert!(cut(&server, "overloaded") >= 1.0);
    // Still open: the flood was neither served nor closed.
    let open = flood
        .iter_mut()
        .take(100)
        .filter(|s: &&mut TcpStream| {
            let s: &TcpStream = s;
            let mut s = s;
            s.set_nonblocking(true).unwrap();
            let mut b = [0u8; 1];
            matches!(s.read(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock)
        })
        .count();
    assert_eq!(open, 100);
    drop(flood);
}

#[test]
fn a_body_slower_than_the_minimum_rate_or_the_total_time_is_cut_with_408() {
    let server = TestServer::start_fresh(|c| {
        c.http.body_min_bytes_per_sec = 100;
        c.http.body_read_timeout_ms = 1_500;
    });
    let (alice, _) = server.register_test_profile_with_keys();

    // Too slow: one byte every 200 ms is 5 B/s.
    let started = Instant::now();
    let mut stream = slow_body(server.addr, &alice);
    let mut cut_at = None;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(200));
        if stream.write_all(b" ").is_err() {
            cut_at = Some(started.elapsed());
            break;
        }
        stream.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let closed = !matches!(stream.read(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock);
        stream.set_nonblocking(false).unwrap();
        if closed {
            cut_at = Some(started.elapsed());
            break;
        }
    }
    let cut_at = cut_at.expect("the slow body was never cut");
    assert!(cut_at < Duration::from_millis(2_000), "{cut_at:?}");
    assert_eq!(cut(&server, "body-too-slow"), 1.0);

    // Fast enough, never finished: the total time cuts it with a typed 408.
    let mut stream = slow_body(server.addr, &alice);
    let writer = stream.try_clone().unwrap();
    let feeder = std::thread::spawn(move || {
        let mut writer = writer;
        for _ in 0..30 {
            if writer.write_all(&[b' '; 50]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(4));
    assert!(closed, "{text}");
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"error\":\"body-timeout\""), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    feeder.join().unwrap();
    assert_eq!(cut(&server, "body-timeout"), 1.0);
}

#[test]
fn clients_that_never_read_their_responses_are_cut_and_operators_still_get_in() {
    let _flood = FLOODS.lock().unwrap_or_else(|e| e.into_inner());
    let server = TestServer::start_fresh(|c| {
        c.http.max_connections = 64;
        c.http.response_write_timeout_ms = 500;
    });
    // 64 connections pipeline GET /openapi.json (51 kB each) and never read an answer.
    let request = "GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n".repeat(400);
    let hogs: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(request.as_bytes());
            s
        })
        .collect();
    let (took, text) = probe_healthz(server.addr);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    eprintln!("healthz while 64 connections are pinned: {took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let started = Instant::now();
    while cut(&server, "write-timeout") < 64.0 {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "write-timeout cuts: {}",
            cut(&server, "write-timeout")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("64 write-timeout cuts after {:?}", started.elapsed());
    drop(hogs);
    // The pool is free again.
    assert_eq!(server.status_of_get("/healthz"), 200);
}

#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let server = TestServer::start_fresh(|c| c.http.keep_alive_idle_ms = 300);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let started = Instant::now();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (text, closed) = read_until_closed(&mut stream, Duration::from_secs(3));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(closed, "the idle connection stayed open");
    assert!(started.elapsed() < Duration::from_millis(2_000));
    assert_eq!(cut(&server, "idle-timeout"), 1.0);
    assert_eq!(cut(&server, "header-timeout"), 0.0);
}

#[test]
fn one_address_and_one_key_cannot_hold_more_than_their_caps() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |c| {
        c.http.max_connections_per_address = 4;
        c.http.max_requests_per_key = 2;
    });
    let (alice, bob) = server.register_test_profile_with_keys();

    // Per key: two slow bodies hold alice's slots; her third request is refused at once.
    let held: Vec<TcpStream> = (0..2).map(|_| slow_body(server.addr, &alice)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut third = slow_body(server.addr, &alice);
    let (text, closed) = read_until_closed(&mut third, Duration::from_secs(3));
    assert!(text.starts_with("HTTP/1.1 429"), "{text}");
    assert!(text.contains("\"error\":\"key-busy\""), "{text}");
    assert!(closed);
    assert_eq!(cut(&server, "key-cap"), 1.0);
    let bob_ok = server.post("/v1/budgets/b/release", &bob).send().unwrap();
    assert_eq!(bob_ok.status(), 200);
    drop(held);
    drop(server);

    // Per address (a fresh service: no pooled test-client connection counts): four open
    // connections; the fifth is closed at accept.
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), |c| c.http.max_connections_per_address = 4);
    let open: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = TcpStream::connect(server.addr).unwrap();
    let _ = fifth.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let (text, closed) = read_until_closed(&mut fifth, Duration::from_secs(3));
    assert!(closed && text.is_empty(), "{text}");
    // The metrics request itself needs a slot of this address.
    drop(open);
    std::thread::sleep(Duration::from_millis(200));
    assert!(cut(&server, "address-cap") >= 1.0);
}

/// Opens `GET …/events` for workspace `t` and reads until the first `update` arrived.
fn open_event_stream(addr: SocketAddr, key: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /v1/workspaces/t/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("event: update") {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no first update"
        );
        match stream.read(&mut buf) {
            Ok(0) => panic!("the stream closed: {}", String::from_utf8_lossy(&seen)),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    stream
}

#[test]
fn an_open_event_stream_holds_one_of_its_keys_request_slots() {
    let server = TestServer::start_fresh(|c| c.http.max_requests_per_key = 2);
    let (alice, bob) = server.register_test_profile_with_keys();
    // Two open streams hold both of alice's slots: her next request is refused at once.
    let first = open_event_stream(server.addr, &alice);
    let _second = open_event_stream(server.addr, &alice);
    let refused = server
        .get("/v1/workspaces/t/snapshot", &alice)
        .send()
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.json::<Value>().unwrap()["error"], "key-busy");
    // Another key is not affected.
    let bob_ok = server
        .get("/v1/workspaces/t/snapshot", &bob)
        .send()
        .unwrap();
    assert_eq!(bob_ok.status(), 200);
    // A stream whose client left gives its slot back (the server notices at its next write,
    // within the one-second quiet update).
    drop(first);
    let started = Instant::now();
    loop {
        let answer = server
            .get("/v1/workspaces/t/snapshot", &alice)
            .send()
            .unwrap();
        if answer.status() == 200 {
            break;
        }
        assert_eq!(answer.status(), 429);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the left stream still holds its slot"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn one_principal_cannot_queue_more_than_its_pending_cap() {
    let server = TestServer::start_fresh(|c| c.admission.max_pending_per_key = 1);
    let (alice, bob) = server.register_test_profile_with_keys();
    // bob holds provider p's one permit; alice's first request waits, her second is refused.
    let lease = server.acquire(
        &bob,
        &json!({"providerId": "p", "budgetId": "b", "estimate": {}}),
    );
    assert_eq!(lease.status(), 200);
    let waiting = {
        let url = server.url("/v1/admissions");
        let alice = alice.clone();
        std::thread::spawn(move || {
            reqwest::blocking::Client::new()
                .post(url)
                .bearer_auth(alice)
                .json(&json!({"providerId": "p", "budgetId": "a", "estimate": {}, "deadlineMs": 1500}))
                .send()
                .unwrap()
                .status()
        })
    };
    let started = Instant::now();
    while server.snapshot("t")["queued"] != 1 {
        assert!(started.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused = server.acquire(
        &alice,
        &json!({"providerId": "wide", "budgetId": "a2", "estimate": {}, "deadlineMs": 0}),
    );
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.json::<Value>().unwrap()["error"], "key-busy");
    assert_eq!(cut(&server, "pending-cap"), 1.0);
    assert_eq!(
        waiting.join().unwrap(),
        429,
        "the waiter timed out in the queue"
    );
    // The slot came back with the answer.
    let free = server.acquire(
        &alice,
        &json!({"providerId": "wide", "budgetId": "a3", "estimate": {}, "deadlineMs": 0}),
    );
    assert_eq!(free.status(), 200);
}
