//! `turnstile qualify` as a Unix citizen: a reader that stops early ends it quietly.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn qualify_arrivals_into_a_closed_pipe_ends_quietly_and_successfully() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["qualify", "arrivals"])
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the turnstile binary runs");
    let stdout = child.stdout.take().unwrap();
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).unwrap();
    // The reader is gone (like `| head -1`); 20,000 more lines are still to be written.
    let output = child.wait_with_output().unwrap();
    let arrival: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(arrival["ordinal"], 0);
    assert!(output.status.success(), "{:?}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
}
