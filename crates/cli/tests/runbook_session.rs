//! The admission runbook's procedure (`docs/operations/admission.md`, RUN-JEV-ADMISSION-v1)
//! runs verbatim: its `sh` blocks, in order, in one `bash -euo pipefail` against a real
//! `turnstile serve` on the demo workspace, with `$EDITOR` a script that tightens the
//! candidate's workspace concurrency. Every step is a real request; a step the service refuses
//! fails the run (`curl --fail-with-body`).

#![cfg(unix)]

use std::process::Command;

mod common;

const RUNBOOK: &str = include_str!("../../../docs/operations/admission.md");

/// The `sh` blocks of the "Procedure" section, in order.
fn procedure_blocks() -> Vec<String> {
    let start = RUNBOOK.find("## Procedure").expect("a Procedure section");
    let section = &RUNBOOK[start..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in section.lines() {
        let trimmed = line.trim_start();
        match (&mut current, trimmed) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap_or_default().join("\n")),
            (Some(lines), _) => lines.push(trimmed),
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn run_jev_admission_v1_procedure_runs_verbatim_against_a_real_service() {
    for tool in ["curl", "jq", "bash"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool} >/dev/null")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "{tool} is needed by the runbook (apt-get install {tool})"
        );
    }
    let blocks = procedure_blocks();
    assert!(blocks.len() >= 6, "the procedure's steps: {blocks:?}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("turnstile.toml");
    std::fs::write(&config, "").unwrap();
    let server = common::start(&dir.path().join("data"), &config, true);
    let admin_key = server
        .admin_key
        .clone()
        .expect("first start names the admin key");
    let editor = dir.path().join("tighten.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nset -e\njq '.workspace.concurrency = 2 | .workspace.maxQueueLength = 4' \"$1\" > \"$1.new\"\nmv \"$1.new\" \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_turnstile"))
        .parent()
        .unwrap()
        .to_owned();
    // `export TURNSTILE=… ADMIN_KEY=tsk_… WS=demo` in the runbook: the placeholders replaced.
    let script = blocks
        .join("\n")
        .replace("http://127.0.0.1:8686", &format!("http://{}", server.addr))
        .replace("tsk_…", &admin_key);
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env("EDITOR", &editor)
        .env(
            "PATH",
            format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the runbook's procedure failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // Step 6's last line: the rollback record, with its approval on record.
    let last: serde_json::Value =
        serde_json::from_str(&stdout[stdout.rfind("{\n").expect("the last record is printed")..])
            .unwrap();
    assert_eq!(last["kind"], "rollback", "{last}");
    assert_eq!(last["profileVersion"], "demo-v1", "{last}");
    assert_eq!(last["approvedBy"], "on-call lead", "{last}");
    assert!(last["actorKeyId"].is_string(), "{last}");
    // The rollouts on record: the shadow aborted, the canary promoted.
    let rollouts: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!(
            "http://{}/v1/workspaces/demo/rollouts",
            server.addr
        ))
        .bearer_auth(&admin_key)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let events: Vec<(&str, &str)> = rollouts["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["event"].as_str().unwrap(), r["mode"].as_str().unwrap()))
        .collect();
    assert_eq!(
        events,
        [
            ("started", "shadow"),
            ("aborted", "shadow"),
            ("started", "canary"),
            ("promoted", "canary")
        ],
        "{rollouts}"
    );
}
