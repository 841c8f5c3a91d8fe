//! `turnstile serve` holds its data directory: a second process on the same directory exits
//! non-zero naming the holder's PID, also after the lock file was deleted (issue 34, item 5),
//! and after the holder is SIGKILLed (its lock file left behind) a new process starts.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

fn serve(data: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Starts a service and waits until it listens.
fn running(data: &std::path::Path) -> Child {
    let mut child = serve(data).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the banner").unwrap();
        if line.starts_with("turnstile serve: listening on ") {
            break;
        }
    }
    // Keep reading stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    child
}

#[test]
fn a_second_serve_on_the_same_data_directory_exits_non_zero_naming_the_holder() {
    let data = tempfile::tempdir().unwrap();
    let mut first = running(data.path());
    let second = serve(data.path()).output().unwrap();
    assert!(
        !second.status.success(),
        "the second process must not start"
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    let first_line = stderr.lines().next().unwrap_or_default();
    assert!(
        first_line.contains(&format!("pid {}", first.id())) && first_line.contains("in use"),
        "the first line names the holder: {stderr}"
    );

    // SIGKILL leaves the lock file behind; the lock itself dies with the process.
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(data.path().join("turnstile.lock").exists());
    let mut third = running(data.path());
    third.kill().unwrap();
    third.wait().unwrap();
}

/// A cleanup job that deletes `<data>/turnstile.lock` does not lift the lock: the directory
/// itself is locked, so a second process still refuses to start (and never compacts the first
/// one's lease log), and the first keeps serving.
#[test]
fn a_second_serve_is_refused_after_the_lock_file_was_deleted() {
    let data = tempfile::tempdir().unwrap();
    let mut first = running(data.path());
    std::fs::remove_file(data.path().join("turnstile.lock")).unwrap();
    let segments_before = lease_files(data.path());
    // Before the fix the second one started and served: do not wait for it forever.
    let mut second = serve(data.path()).spawn().unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while second.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > give_up {
            second.kill().unwrap();
            first.kill().unwrap();
            panic!("the second process started on the held directory");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let second = second.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success(),
        "the second process must not start: {stderr}"
    );
    assert!(
        stderr.lines().next().unwrap_or_default().contains("in use"),
        "the first line says the directory is in use: {stderr}"
    );
    assert_eq!(
        lease_files(data.path()),
        segments_before,
        "the first process's lease log is untouched"
    );
    assert!(first.try_wait().unwrap().is_none(), "the first still runs");
    first.kill().unwrap();
    first.wait().unwrap();
}

/// The lease log's file names.
fn lease_files(data: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data.join("leases"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A first start whose address is taken fails before it initialises the data directory: the
/// once-only admin and demo keys are not generated (and lost) by a start that never served;
/// the next start on a free port prints them.
#[test]
fn a_first_start_on_a_taken_port_does_not_burn_the_once_only_keys() {
    let data = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    let failed = command
        .args(["serve", "--listen", &address, "--data"])
        .arg(data.path())
        .output()
        .unwrap();
    assert!(!failed.status.success(), "the port is taken");
    let stdout = String::from_utf8_lossy(&failed.stdout);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!stdout.contains("admin key"), "no key printed: {stdout}");
    assert!(
        stderr.contains(&address),
        "the error names the address: {stderr}"
    );
    assert!(
        !data.path().join("turnstile.db").exists()
            && std::fs::read_dir(data.path())
                .unwrap()
                .filter_map(Result::ok)
                .all(|entry| entry.file_name() == "turnstile.lock"),
        "nothing but the lock file was written"
    );
    drop(taken);

    // The next start, on a free port, is the first one: it prints the keys.
    let mut child = serve(data.path()).spawn().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = false;
    // The keys follow the banner.
    for line in lines {
        let line = line.unwrap();
        if line.contains("admin key:") {
            printed = true;
            break;
        }
        if line.starts_with("Lost the admin key?") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(printed, "the first start that serves prints the admin key");
}

/// `--listen` takes a port alone (loopback) or a host name, and refuses anything else with
/// what it accepts.
#[test]
fn listen_takes_a_port_alone_or_a_host_name() {
    for given in ["0", "localhost:0"] {
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
            .args(["serve", "--listen", given, "--data"])
            .arg(data.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let first = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .next()
            .expect("the banner")
            .unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            first.starts_with("turnstile serve: listening on http://127.0.0.1:"),
            "{given}: {first}"
        );
    }
    let refused = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "localhost", "--data", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "an invalid argument");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("e.g. 127.0.0.1:8686"), "{stderr}");
}
