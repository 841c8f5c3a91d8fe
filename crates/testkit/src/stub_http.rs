//! A recording HTTP/1.1 stub on loopback: every request (path and body) is recorded the moment
//! it has been read, then answered by the test's function (which may take its time: each
//! connection has its own thread). An OTLP/HTTP receiver, or a provider that counts requests
//! and answers slowly.
//!
//! Invariants: a request is counted before its answer starts, so a test can wait until the
//! stub *saw* a call and then act while it is in flight; keep-alive connections are served
//! request after request; a client that goes away ends only its connection's thread.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One request the stub read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The request path (with its query, as sent).
    pub path: String,
    /// The request body.
    pub body: Vec<u8>,
}

/// The answer to one request: status and JSON body (`application/json`).
pub type StubAnswer = (u16, String);

type Answerer = dyn Fn(&Recorded) -> StubAnswer + Send + Sync;

/// The stub; it serves until the test process ends.
pub struct StubHttp {
    base: String,
    received: Arc<Mutex<Vec<Recorded>>>,
}

impl StubHttp {
    /// A stub answering every request with `answer(request)`.
    pub fn start(answer: impl Fn(&Recorded) -> StubAnswer + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let base = format!("http://{}", listener.local_addr().expect("its address"));
        let received: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let answer: Arc<Answerer> = Arc::new(answer);
        let sink = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (sink, answer) = (Arc::clone(&sink), Arc::clone(&answer));
                std::thread::spawn(move || serve_connection(stream, &sink, &*answer));
            }
        });
        StubHttp { base, received }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Every request read so far, in arrival order.
    pub fn received(&self) -> Vec<Recorded> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many requests were read on `path`.
    pub fn count(&self, path: &str) -> usize {
        self.received().iter().filter(|r| r.path == path).count()
    }

    /// Waits up to `within` until `count(path) >= n`; answers whether it got there.
    pub fn wait_for(&self, path: &str, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.count(path) < n {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }
}

fn serve_connection(stream: TcpStream, sink: &Mutex<Vec<Recorded>>, answer: &Answerer) {
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(reader);
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_owned();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = Recorded { path, body };
        sink.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.clone());
        let (status, body) = answer(&request);
        let head = format!(
            "HTTP/1.1 {status} STUB\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if writer
            .write_all(format!("{head}{body}").as_bytes())
            .is_err()
        {
            return;
        }
    }
}
