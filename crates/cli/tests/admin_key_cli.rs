//! `turnstile admin-key reset`: refused while a service holds the data directory, then replaces
//! the lost admin key (the old one is refused, the new one works), audited in the store.
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use turnstile_store::{AuditKind, ServiceStore, SqliteServiceStore};

/// A running `turnstile serve` on an ephemeral port: its base URL and banner keys.
struct Serve {
    child: Child,
    base: String,
    admin: Option<String>,
}

fn serve(data: &Path, first_start: bool) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut base = None;
    let mut admin = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(url) = line.strip_prefix("turnstile serve: listening on ") {
            base = Some(url.to_owned());
        }
        if line.trim_start().starts_with("admin key:") {
            admin = line.split_whitespace().last().map(str::to_owned);
        }
        // Without a banner (a restart) nothing follows the state line.
        if (line.starts_with("  state:") && !first_start) || line.starts_with("Lost the admin key?")
        {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Serve {
        child,
        base: base.expect("the listen line"),
        admin,
    }
}

fn stop(mut serve: Serve) {
    let killed = Command::new("kill")
        .args(["-TERM", &serve.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(serve.child.wait().unwrap().success());
}

fn reset(data: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["admin-key", "reset", "--data"])
        .arg(data)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

fn list_keys(base: &str, key: &str) -> u16 {
    reqwest::blocking::Client::new()
        .get(format!("{base}/v1/workspaces/demo/keys"))
        .bearer_auth(key)
        .send()
        .unwrap()
        .status()
        .as_u16()
}

#[test]
fn a_lost_admin_key_is_replaced_offline_and_audited_but_never_under_a_running_service() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let running = serve(&data, true);
    let old = running
        .admin
        .clone()
        .expect("first start prints the admin key");
    assert_eq!(list_keys(&running.base, &old), 200);

    let refused = reset(&data);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("in use by another turnstile process"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: stop the service"), "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    assert!(refused.stdout.is_empty(), "no key minted");
    assert_eq!(list_keys(&running.base, &old), 200, "nothing changed");
    stop(running);

    let minted = reset(&data);
    assert!(
        minted.status.success(),
        "{}",
        String::from_utf8_lossy(&minted.stderr)
    );
    let new = String::from_utf8(minted.stdout).unwrap().trim().to_owned();
    assert!(new.starts_with("tsa_"), "{new}");
    {
        let store = SqliteServiceStore::open_dir(&data).unwrap();
        let audit = store.audit("", AuditKind::AdminKeyReset, 10).unwrap();
        assert_eq!(audit.len(), 1);
        let record: serde_json::Value = serde_json::from_str(&audit[0].record_json).unwrap();
        assert_eq!(record["schema"], "turnstile-admin-key-reset/v1");
        assert!(!audit[0].record_json.contains(&new), "never the key itself");
    }

    let restarted = serve(&data, false);
    assert!(restarted.admin.is_none(), "not a first start");
    assert_eq!(
        list_keys(&restarted.base, &old),
        401,
        "the lost key is dead"
    );
    assert_eq!(list_keys(&restarted.base, &new), 200);
    stop(restarted);

    let nowhere = reset(&dir.path().join("missing"));
    assert_eq!(nowhere.status.code(), Some(1));
    assert!(!dir.path().join("missing").exists(), "nothing created");
}
