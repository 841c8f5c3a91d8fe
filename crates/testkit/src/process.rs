//! `turnstile serve` as a separate process ([`ServeProcess`]), for tests that kill it, restart
//! it on the same data directory, or run several replicas side by side.
//!
//! The binary is passed in ([`Turnstile`]): only the `turnstile` crate's own tests can name it
//! (`env!("CARGO_BIN_EXE_turnstile")`), so they hand its path to this kit.
//!
//! Invariants: a [`ServeProcess`] is killed and reaped on drop, also when a test panics (a
//! `turnstile serve` left running would keep the test's output pipe open and hang a piped
//! `cargo test`); its stdout is read to the end on a thread, so it never blocks on a full pipe.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The `turnstile` binary, by its path (`Turnstile(env!("CARGO_BIN_EXE_turnstile"))`).
#[derive(Debug, Clone, Copy)]
pub struct Turnstile(pub &'static str);

impl Turnstile {
    /// `turnstile serve` on a free loopback port with `data` and `config`; `first` when this is
    /// the first start on `data` (the banner then names the admin key).
    pub fn serve(self, data: &Path, config: &Path, first: bool) -> ServeProcess {
        self.serve_with(data, config, first, &[])
    }

    /// [`Turnstile::serve`] with extra arguments (e.g. `--redis-url`).
    pub fn serve_with(
        self,
        data: &Path,
        config: &Path,
        first: bool,
        extra: &[&str],
    ) -> ServeProcess {
        let listening = |line: &str| line.starts_with(LISTENING);
        let admin_key = |line: &str| line.trim().starts_with(ADMIN_KEY);
        // The banner: the address, then (first start only) the admin key.
        self.serve_reading(data, config, extra, |line| {
            (listening(line) && !first) || admin_key(line)
        })
        .0
    }

    /// `turnstile serve` with `extra` arguments, its banner read up to the first line `until`
    /// accepts: the process (its address and admin key taken from the banner) and the lines
    /// read.
    pub fn serve_reading(
        self,
        data: &Path,
        config: &Path,
        extra: &[&str],
        mut until: impl FnMut(&str) -> bool,
    ) -> (ServeProcess, Vec<String>) {
        let mut child = Command::new(self.0)
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .arg("--config")
            .arg(config)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the turnstile binary starts");
        let stdout = child.stdout.take().expect("a piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut banner = Vec::new();
        for line in lines.by_ref() {
            let line = line.expect("the banner is text");
            let done = until(&line);
            banner.push(line);
            if done {
                break;
            }
        }
        // Keep reading stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let addr = banner
            .iter()
            .find_map(|line| line.strip_prefix(LISTENING))
            .map(|rest| rest.trim().to_owned());
        let admin_key = banner
            .iter()
            .find_map(|line| line.trim().strip_prefix(ADMIN_KEY))
            .map(|rest| rest.trim().to_owned());
        let process = ServeProcess {
            child,
            addr: addr.expect("the service listens"),
            admin_key,
        };
        (process, banner)
    }
}

/// The banner line that names the address.
const LISTENING: &str = "turnstile serve: listening on http://";
/// The banner line that names the admin key (first start only).
const ADMIN_KEY: &str = "admin key:";

/// A running `turnstile serve`.
pub struct ServeProcess {
    /// The process.
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The admin key (first start only).
    pub admin_key: Option<String>,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
