//! The README's first session, run verbatim (with the built binary's path and a free port
//! substituted, and the `cargo build` line dropped) against a real `turnstile serve`: it must
//! succeed, and every `# -> …` line must be what the command before it printed.
#![cfg(unix)]

use std::path::Path;
use std::process::Command;

/// The first ```sh block after the "## A first session" heading.
fn session_block(readme: &str) -> String {
    let section = readme
        .split("## A first session")
        .nth(1)
        .expect("README has the first-session section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("a ```sh block");
    block.to_owned()
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn the_readme_session_runs_verbatim_and_prints_what_it_says() {
    for tool in ["curl", "jq", "timeout"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        assert!(
            found.status.success(),
            "{tool} is required by the README session"
        );
    }
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let block = session_block(&readme);
    assert!(block.contains("target/debug/turnstile serve --listen 127.0.0.1:8686"));
    let port = free_port().to_string();
    let script: String = block
        .lines()
        .filter(|line| !line.starts_with("cargo "))
        .map(|line| {
            line.replace("target/debug/turnstile", env!("CARGO_BIN_EXE_turnstile"))
                .replace("8686", &port)
        })
        .collect::<Vec<_>>()
        .join("\n");
    let script =
        format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}\n");
    // `timeout` only guards against a hang; no assertion depends on time.
    let output = Command::new("timeout")
        .args(["120", "bash", "-c", &script])
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the session failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let printed: Vec<&str> = stdout.lines().map(str::trim_end).collect();
    let mut at = 0;
    for expected in block.lines().filter_map(|l| l.strip_prefix("# -> ")) {
        match printed[at..].iter().position(|line| *line == expected) {
            Some(offset) => at += offset + 1,
            None => panic!("`{expected}` was not printed (in order)\nstdout:\n{stdout}"),
        }
    }
    assert!(stdout.contains("First start: these keys are shown once"));
    assert!(stdout.contains("ok: "), "profile check passed: {stdout}");
    assert!(
        stdout.contains("turnstile_admission_decisions_total{"),
        "{stdout}"
    );
}
