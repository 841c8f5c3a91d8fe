//! The README's first session, run verbatim (with the built binary's path substituted for
//! `target/release/turnstile`, and the `cargo build` line dropped) against a real `turnstile
//! serve` on a free port of its own choosing: it must succeed, and every `# -> …` line must be
//! what the command before it printed. A session whose `serve` cannot start does not hang: it
//! shows why and the commands after it fail (second test).
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

/// Every `# -> …` line of `block` was printed, in order, in `stdout`.
#[track_caller]
fn assert_printed_in_order(block: &str, stdout: &str) {
    let printed: Vec<&str> = stdout.lines().map(str::trim_end).collect();
    let mut at = 0;
    for expected in block.lines().filter_map(|l| l.strip_prefix("# -> ")) {
        match printed[at..].iter().position(|line| *line == expected) {
            Some(offset) => at += offset + 1,
            None => panic!("`{expected}` was not printed (in order)\nstdout:\n{stdout}"),
        }
    }
}

/// The block as a script: `cargo` lines dropped, the test's binary for the release one.
fn runnable(block: &str) -> String {
    block
        .lines()
        .filter(|line| !line.starts_with("cargo "))
        .map(|line| line.replace("target/release/turnstile", env!("CARGO_BIN_EXE_turnstile")))
        .collect::<Vec<_>>()
        .join("\n")
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
    assert!(block.contains("target/release/turnstile serve --listen 127.0.0.1:0 "));
    assert!(!block.contains("8686"), "the session picks its own port");
    let script = runnable(&block);
    let script =
        format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}\n");
    // `timeout` only guards against a hang; no assertion depends on time.
    // From the repository's root, like a reader who cloned it (the session names examples/).
    let output = Command::new("timeout")
        .args(["120", "bash", "-c", &script])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the session failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    assert_printed_in_order(&block, &stdout);
    assert!(stdout.contains("First start: these keys are shown once"));
    assert!(stdout.contains("ok: "), "profile check passed: {stdout}");
    assert!(
        stdout.contains("turnstile_admission_decisions_total{"),
        "{stdout}"
    );
}

/// A session whose `serve` cannot start (here: an unusable Redis URL in the environment) does
/// not wait forever for the banner: the wait ends when `serve` exits, and `cat` shows why.
#[test]
fn the_readme_session_does_not_hang_when_serve_cannot_start() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let block = session_block(&readme);
    // The session up to the banner's `cat`.
    let end = block
        .lines()
        .position(|line| line.starts_with("cat \"$T/serve.log\""))
        .expect("the session shows serve's log");
    let start: Vec<&str> = block.lines().take(end + 1).collect();
    let script = format!("set -uo pipefail\n{}\n", runnable(&start.join("\n")));
    let output = Command::new("timeout")
        .args(["60", "bash", "-c", &script])
        .env("TURNSTILE_REDIS_URL", "not-a-redis-url")
        .output()
        .unwrap();
    assert_ne!(output.status.code(), Some(124), "the session hung");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("error:") && stdout.contains("invalid Redis URL"),
        "serve's log says why it stopped: {stdout}"
    );
}

/// The bench binary (`TURNSTILE_BENCH_BIN`, as `.ci/run` exports it, else the debug build a
/// workspace test run makes); missing is a failure, never a skip.
fn bench_bin() -> String {
    let path = std::env::var("TURNSTILE_BENCH_BIN").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/debug/turnstile-bench")
            .display()
            .to_string()
    });
    assert!(
        Path::new(&path).is_file(),
        "turnstile-bench not found at {path}: `cargo build -p turnstile-bench`"
    );
    path
}

/// The README's offline proxy session ("Try it offline"): the fake upstream, `serve` with
/// `examples/proxy.toml` and only OpenAI's variables (the Anthropic upstream is disabled with
/// a warning), one chat completion; run verbatim (binaries substituted, `cargo` dropped, from
/// the repository root) and checked line by line.
#[test]
fn the_readme_offline_proxy_session_runs_verbatim() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let block = readme
        .split("### Try it offline")
        .nth(1)
        .and_then(|section| section.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("\n```").next())
        .expect("the offline proxy session");
    let bench = bench_bin();
    let script: String = block
        .lines()
        .filter(|line| !line.starts_with("cargo "))
        .map(|line| {
            line.replace("target/release/turnstile-bench", &bench)
                .replace("target/release/turnstile", env!("CARGO_BIN_EXE_turnstile"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let script = format!(
        "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n\
         unset TURNSTILE_ANTHROPIC_API_KEY TURNSTILE_ANTHROPIC_BASE_URL RUST_LOG\n{script}\n"
    );
    let output = Command::new("timeout")
        .args(["120", "bash", "-c", &script])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the session failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_printed_in_order(block, &stdout);
}
