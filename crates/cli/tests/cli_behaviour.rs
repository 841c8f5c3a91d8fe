//! The command line as a new user meets it: the order of `--help`, one-line errors with hints
//! and no backtrace (even with `RUST_BACKTRACE=1`) unless `--verbose`, exit statuses, and
//! nothing written into the service's data directory unless asked.

use std::process::{Command, Output};

use turnstile_testkit::repo_file;

fn turnstile() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LIB_BACKTRACE");
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a user error: exit 1, exactly an `error:` line and a `hint:` line, no backtrace.
fn assert_user_error(output: &Output, needle: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one error line and one hint line: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    assert!(lines[0].contains(needle), "{stderr}");
    assert!(lines[1].starts_with("hint: "), "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
}

#[test]
fn help_lists_serve_first_and_documents_the_exit_statuses() {
    let output = turnstile().arg("--help").output().unwrap();
    assert!(output.status.success());
    let help = text(&output.stdout);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        [
            "serve",
            "profile",
            "evaluate",
            "roster",
            "qualify",
            "admin-key",
            "help"
        ]
    );
    assert!(help.contains("Exit status"), "{help}");
}

/// `turnstile --version` names the crate version and the commit the binary was built from
/// (the checkout's HEAD when git can tell; `TURNSTILE_COMMIT` overrides it at build time).
#[test]
fn version_names_the_release_and_the_commit() {
    let output = turnstile().arg("--version").output().unwrap();
    assert!(output.status.success());
    let version = text(&output.stdout);
    let expected = format!("turnstile {} (", env!("CARGO_PKG_VERSION"));
    assert!(version.starts_with(&expected), "{version}");
    let commit = version
        .trim_end()
        .strip_prefix(&expected)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no commit in {version:?}"));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_owned());
    match (head, std::env::var("TURNSTILE_COMMIT")) {
        (_, Ok(set)) if !set.is_empty() => assert_eq!(commit, set),
        (Some(head), _) => assert_eq!(commit, head, "built from HEAD"),
        (None, _) => assert_eq!(commit, "unknown"),
    }
}

#[test]
fn help_lists_only_product_commands_and_the_tools_are_not_commands() {
    // The load tools and the fake upstream are the `turnstile-bench` binary (crates/bench).
    let help = text(&turnstile().arg("--help").output().unwrap().stdout);
    for tool in ["bench", "fake-upstream"] {
        assert!(!help.contains(tool), "{tool} in turnstile --help: {help}");
    }
    for tool in ["bench-serve", "bench-proxy", "fake-upstream"] {
        let output = turnstile().arg(tool).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{tool} is not a command");
    }
}

#[test]
fn a_user_error_is_one_line_with_a_hint_and_no_backtrace_unless_verbose() {
    let missing = turnstile()
        .args(["profile", "check", "/nonexistent/profile.json"])
        .output()
        .unwrap();
    assert_user_error(&missing, "cannot read /nonexistent/profile.json");

    let verbose = turnstile()
        .args(["profile", "check", "/nonexistent/profile.json", "--verbose"])
        .output()
        .unwrap();
    assert_eq!(verbose.status.code(), Some(1));
    let stderr = text(&verbose.stderr);
    assert!(stderr.starts_with("error: cannot read"), "{stderr}");
    assert!(stderr.contains("details (--verbose)"), "{stderr}");
    assert!(stderr.to_lowercase().contains("backtrace"), "{stderr}");
}

#[test]
fn a_serve_error_names_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("turnstile.toml");
    std::fs::write(&config, "bogus = 1\n").unwrap();
    let output = turnstile()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: invalid config file"), "{stderr}");
    assert_eq!(
        stderr.matches("unknown field `bogus`").count(),
        1,
        "{stderr}"
    );
}

/// `profile check` reports every problem at once, on one line, with the field a misspelt one
/// likely meant.
#[test]
fn profile_check_reports_every_problem_with_did_you_mean() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        r#"{"workspace":{"concurrency":4,"maxQueueLenght":10},
            "providers":{"jev":{"concurrency":2,"requestsBurst":0},
                         "llm":{"concurrency":"2"}},
            "principals":{"a":{"concurrency":1,"wieght":2}}}"#,
    )
    .unwrap();
    let output = turnstile()
        .args(["profile", "check"])
        .arg(&file)
        .output()
        .unwrap();
    assert_user_error(&output, "4 problems: ");
    let stderr = text(&output.stderr);
    for needle in [
        "workspace.maxQueueLenght: unknown field; did you mean `maxQueueLength`?",
        "providers.jev.requestsBurst: requestsBurst needs",
        "providers.llm.concurrency: invalid type",
        "principals.a.wieght: unknown field; did you mean `weight`?",
    ] {
        assert!(stderr.contains(needle), "{needle} in {stderr}");
    }
}

#[test]
fn profile_check_names_the_field_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        r#"{"workspace":{"concurrency":4},
            "providers":{"jev":{"concurrency":2,"requestsPerMinute":600,"requestsBurst":0}}}"#,
    )
    .unwrap();
    let output = turnstile()
        .args(["profile", "check"])
        .arg(&file)
        .output()
        .unwrap();
    assert_user_error(&output, "providers.jev.requestsBurst: requestsBurst needs");

    std::fs::write(
        &file,
        r#"{"workspace":{"concurrency":4},"providers":{"jev":{"concurrency":"2"}}}"#,
    )
    .unwrap();
    let output = turnstile()
        .args(["profile", "check"])
        .arg(&file)
        .output()
        .unwrap();
    assert_user_error(&output, "providers.jev.concurrency: invalid type");

    let good = turnstile()
        .args(["profile", "check"])
        .arg(repo_file("examples/profile.json"))
        .output()
        .unwrap();
    assert!(good.status.success(), "{}", text(&good.stderr));
    assert!(text(&good.stdout).starts_with("ok: "));
    assert!(text(&good.stdout).contains("digest sha256:"));
}

#[test]
fn profile_digest_requires_a_file() {
    let output = turnstile().args(["profile", "digest"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "a usage error");
    assert!(text(&output.stderr).contains("<FILE>"));
    assert!(output.stdout.is_empty());
}

/// `evaluate` prints the result either way; exit 3 says its status is `error`.
#[test]
fn evaluate_exits_3_on_an_error_result_and_0_on_a_completed_one() {
    let fixtures = repo_file("examples/fixtures");
    let run = |ruleset: &str| {
        turnstile()
            .arg("evaluate")
            .arg("--ruleset")
            .arg(fixtures.join(ruleset))
            .arg("--binding")
            .arg(fixtures.join("binding-jev.json"))
            .arg("--definitions")
            .arg(&fixtures)
            .arg("--input")
            .arg(fixtures.join("input.json"))
            .arg("--adapters")
            .arg(repo_file("examples/adapters.scripted.json"))
            .output()
            .unwrap()
    };
    let completed = run("ruleset.json");
    assert_eq!(
        completed.status.code(),
        Some(0),
        "{}",
        text(&completed.stderr)
    );
    // A binding where the ruleset should be: the evaluator answers with an error result.
    let error = run("binding-jev.json");
    assert_eq!(error.status.code(), Some(3), "{}", text(&error.stderr));
    let result: serde_json::Value = serde_json::from_slice(&error.stdout).unwrap();
    assert_eq!(result["spec"]["status"], "error");
    let stderr = text(&error.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: the result's status is error"),
        "{stderr}"
    );
}

#[test]
fn qualify_writes_records_only_where_asked() {
    let cwd = tempfile::tempdir().unwrap();
    let output = turnstile()
        .arg("qualify")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("not written; --out DIR writes it"));
    assert_eq!(
        std::fs::read_dir(cwd.path()).unwrap().count(),
        0,
        "nothing written"
    );

    let out = cwd.path().join("records");
    let output = turnstile()
        .args(["qualify", "--out"])
        .arg(&out)
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(out.join("admission-controller.json").is_file());
}

#[test]
fn roster_status_and_records_create_nothing() {
    let cwd = tempfile::tempdir().unwrap();
    for args in [&["roster", "status"][..], &["roster", "records"]] {
        let output = turnstile()
            .args(args)
            .current_dir(cwd.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);
}
