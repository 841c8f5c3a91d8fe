//! `turnstile profile digest` end to end, through the built binary.

use std::process::Command;

fn turnstile() -> Command {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
}

fn repo_file(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

#[test]
fn profile_digest_of_the_v2_manifest_is_stable_and_matches_the_library() {
    let manifest = repo_file("manifests/load-manifest.v2.json");
    let output = turnstile()
        .args(["profile", "digest"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(
        printed.starts_with("sha256:") && printed.len() == 71,
        "{printed}"
    );

    let document: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let profile: turnstile_admission::Profile = serde_json::from_value(serde_json::json!({
        "workspace": document["workspace"],
        "providers": document["providers"],
    }))
    .unwrap();
    assert_eq!(printed, profile.digest().unwrap());
}

#[test]
fn profile_digest_of_the_example_profile_is_printed() {
    let output = turnstile()
        .args(["profile", "digest"])
        .arg(repo_file("examples/profile.json"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn profile_digest_refuses_invalid_limits_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        r#"{"workspace":{"concurrency":2,"maxPrincipalShare":1.5},"providers":{}}"#,
    )
    .unwrap();
    let output = turnstile()
        .args(["profile", "digest"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("maxPrincipalShare"), "{stderr}");

    let missing = turnstile()
        .args(["profile", "digest", "/nonexistent/profile.json"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
}

#[test]
fn profile_digest_without_a_file_digests_the_embedded_v2_manifest() {
    let embedded = turnstile().args(["profile", "digest"]).output().unwrap();
    assert!(embedded.status.success());
    let on_disk = turnstile()
        .args(["profile", "digest"])
        .arg(repo_file("manifests/load-manifest.v2.json"))
        .output()
        .unwrap();
    assert_eq!(embedded.stdout, on_disk.stdout);
}
