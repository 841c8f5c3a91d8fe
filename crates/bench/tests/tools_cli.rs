//! `turnstile-bench` as its user meets it: `--help` lists the three tools; `fake-upstream`
//! prints its address and serves the scripted fake provider; `proxy` measures a short run.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use turnstile_testkit::post_text;

mod common;

#[test]
fn help_lists_the_three_tools() {
    let output = common::bench(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let listed = |name: &str| {
        help.lines()
            .any(|line| line.split_whitespace().next() == Some(name))
    };
    for tool in ["serve", "proxy", "fake-upstream"] {
        assert!(listed(tool), "{tool} in --help: {help}");
    }
    assert!(help.contains("Exit status"), "{help}");
}

/// The fake upstream's own process, killed on drop.
struct Fake(std::process::Child);

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn fake_upstream_prints_its_address_and_answers_a_chat_completion() {
    let mut fake = Fake(
        Command::new(env!("CARGO_BIN_EXE_turnstile-bench"))
            .args(["fake-upstream", "--port", "0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = fake.0.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().next().unwrap().unwrap();
    let addr = line
        .strip_prefix("fake-upstream listening on http://")
        .unwrap_or_else(|| panic!("the first line names the address: {line}"))
        .trim()
        .to_owned();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let answer = post_text(&addr, "/v1/chat/completions", &[], body);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"usage\""), "{answer}");
}

#[test]
fn proxy_measures_direct_and_proxied_calls() {
    let output = common::bench(&[
        "proxy",
        "--clients",
        "1",
        "--seconds",
        "1",
        "--no-stream",
        "--json",
    ]);
    let report = common::json_report(&output);
    let phases = report["phases"].as_array().expect("phases");
    let targets: Vec<&str> = phases
        .iter()
        .map(|phase| phase["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["direct", "proxied"], "{report}");
    for phase in phases {
        assert!(phase["calls"].as_u64().unwrap() > 0, "{report}");
        assert_eq!(phase["failures"], 0, "{report}");
    }
    assert_eq!(
        report["added"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
}
