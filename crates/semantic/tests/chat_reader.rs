//! The real chat-completions reader against a fake OpenAI-compatible server on 127.0.0.1,
//! started inside each test (std::net only; no external network is used).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use turnstile_semantic::chat_reader::ReaderSetupError;
use turnstile_semantic::{
    ApiKey, Band, ChatCompletionsReader, ChatReaderSettings, ReadOutcome, ReadRequest, Reader,
};

/// A request as the fake server saw it.
struct Seen {
    request_line: String,
    authorization: Option<String>,
    body: serde_json::Value,
}

/// Serves `responses` (status, body) to consecutive connections, then stops.
fn fake_server(responses: Vec<(u16, String)>) -> (String, mpsc::Receiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for (status, body) in responses {
            let (stream, _) = listener.accept().unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut length = 0usize;
            let mut authorization = None;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                let (name, value) = line.split_once(':').unwrap();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "authorization" => authorization = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
            let mut raw = vec![0; length];
            reader.read_exact(&mut raw).unwrap();
            tx.send(Seen {
                request_line: request_line.trim_end().to_owned(),
                authorization,
                body: serde_json::from_slice(&raw).unwrap(),
            })
            .unwrap();
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            stream.flush().unwrap();
        }
    });
    (base, rx)
}

fn completion(content: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
            "prompt_tokens_details": {"cached_tokens": 1000},
            "completion_tokens_details": {"reasoning_tokens": 16}
        }
    })
    .to_string()
}

fn settings(base: &str, env: &str) -> ChatReaderSettings {
    ChatReaderSettings {
        base_url: format!("{base}/"),
        model: "tiny-reader".to_owned(),
        api_key_env: env.to_owned(),
        timeout: Duration::from_secs(5),
    }
}

const EVIDENCE: &str = r#"{"generationId":"g1","lifecycle":"active","summary":"testing"}"#;

fn request() -> ReadRequest<'static> {
    ReadRequest {
        generation_id: "g1",
        band: Band::Routine,
        evidence_digest: "sha256:x",
        evidence_json: EVIDENCE,
    }
}

#[test]
fn accepted_read_posts_one_chat_completion_with_the_key_from_the_named_variable() {
    let (base, seen) = fake_server(vec![(
        200,
        completion(
            r#"{"headline":"Running the store tests","detail":"cargo test -p turnstile-store"}"#,
        ),
    )]);
    std::env::set_var("TURNSTILE_TEST_KEY_ACCEPTED", "test-key-123");
    let mut reader =
        ChatCompletionsReader::from_env(&settings(&base, "TURNSTILE_TEST_KEY_ACCEPTED")).unwrap();
    assert!(
        !format!("{reader:?}").contains("test-key-123"),
        "Debug must not show the key"
    );
    assert_eq!(reader.configuration().model, "tiny-reader");
    assert!(!reader.configuration().endpoint.ends_with('/'));

    let outcome = reader.read(&request());
    let ReadOutcome::Accepted { reading, usage } = outcome else {
        panic!("expected accepted, got {outcome:?}");
    };
    assert_eq!(reading.headline, "Running the store tests");
    let usage = usage.unwrap();
    assert_eq!(
        (
            usage.input_tokens,
            usage.cached_input_tokens,
            usage.output_tokens,
            usage.reasoning_tokens
        ),
        (1200, 1000, 40, 16)
    );

    let seen = seen.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(seen.authorization.as_deref(), Some("Bearer test-key-123"));
    assert_eq!(seen.body["model"], "tiny-reader");
    assert_eq!(seen.body["messages"][0]["role"], "system");
    assert_eq!(seen.body["messages"][1]["content"], EVIDENCE);
}

#[test]
fn an_answer_outside_the_contract_is_invalid_and_keeps_its_usage() {
    let (base, _seen) = fake_server(vec![
        (200, completion("The agent is running tests.")),
        (200, "{\"not\":\"a completion\"}".to_owned()),
    ]);
    let mut reader =
        ChatCompletionsReader::new(&settings(&base, "UNUSED"), ApiKey::new("k")).unwrap();
    match reader.read(&request()) {
        ReadOutcome::Invalid { usage, .. } => assert!(usage.is_some()),
        other => panic!("expected invalid, got {other:?}"),
    }
    assert!(matches!(
        reader.read(&request()),
        ReadOutcome::Invalid { .. }
    ));
}

#[test]
fn http_errors_and_refused_connections_are_unavailable() {
    let (base, _seen) = fake_server(vec![
        (503, "{\"error\":{\"message\":\"overloaded\"}}".to_owned()),
        (401, "{\"error\":{\"message\":\"bad key\"}}".to_owned()),
    ]);
    let mut reader =
        ChatCompletionsReader::new(&settings(&base, "UNUSED"), ApiKey::new("secret-k")).unwrap();
    for status in [503, 401] {
        match reader.read(&request()) {
            ReadOutcome::Unavailable { reason } => {
                assert!(reason.contains(&status.to_string()), "{reason}");
                assert!(!reason.contains("secret-k"));
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    // A port with nothing listening.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = closed.local_addr().unwrap();
    drop(closed);
    let mut reader = ChatCompletionsReader::new(
        &settings(&format!("http://{address}/v1"), "UNUSED"),
        ApiKey::new("k"),
    )
    .unwrap();
    assert!(matches!(
        reader.read(&request()),
        ReadOutcome::Unavailable { .. }
    ));
}

#[test]
fn setup_refuses_missing_keys_bad_urls_and_empty_models() {
    let missing = ChatCompletionsReader::from_env(&settings(
        "http://127.0.0.1:9/v1",
        "TURNSTILE_TEST_KEY_THAT_IS_NEVER_SET",
    ));
    assert!(
        matches!(missing, Err(ReaderSetupError::MissingApiKey(name)) if name == "TURNSTILE_TEST_KEY_THAT_IS_NEVER_SET")
    );
    let bad = ChatCompletionsReader::new(&settings("ftp://x", "K"), ApiKey::new("k"));
    assert!(matches!(bad, Err(ReaderSetupError::BadBaseUrl(_))));
    let mut empty = settings("http://127.0.0.1:9/v1", "K");
    empty.model = " ".to_owned();
    assert!(matches!(
        ChatCompletionsReader::new(&empty, ApiKey::new("k")),
        Err(ReaderSetupError::EmptyModel)
    ));
}

#[test]
fn max_tokens_is_sent_only_when_set_and_reported_as_the_output_bound() {
    let answer = || completion(r#"{"headline":"h"}"#);
    let (base, seen) = fake_server(vec![
        (200, answer()),
        (200, answer()),
        (429, "{}".to_owned()),
    ]);
    let plain = ChatCompletionsReader::new(&settings(&base, "UNUSED"), ApiKey::new("k")).unwrap();
    assert_eq!(plain.max_output_tokens(), None);
    let mut capped = plain.with_max_tokens(300);
    assert_eq!(capped.max_output_tokens(), Some(300));
    let mut plain =
        ChatCompletionsReader::new(&settings(&base, "UNUSED"), ApiKey::new("k")).unwrap();
    plain.read(&request());
    let body = seen.recv_timeout(Duration::from_secs(5)).unwrap().body;
    assert!(body.get("max_tokens").is_none(), "{body}");
    capped.read(&request());
    let body = seen.recv_timeout(Duration::from_secs(5)).unwrap().body;
    assert_eq!(body["max_tokens"], 300);

    // A 429 without a Retry-After: rate limited, the wait unknown (the gate's fallback).
    match capped.read(&request()) {
        ReadOutcome::RateLimited {
            reason,
            retry_after_ms,
        } => {
            assert!(reason.contains("429"), "{reason}");
            assert_eq!(retry_after_ms, None);
        }
        other => panic!("expected rate limited, got {other:?}"),
    }
}
