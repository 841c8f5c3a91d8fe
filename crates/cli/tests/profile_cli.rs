//! `turnstile profile digest` end to end, through the built binary.

use std::process::Command;

use turnstile_testkit::repo_file;

fn turnstile() -> Command {
    Command::new(env!("CARGO_BIN_EXE_turnstile"))
}

/// The profile digest of manifest v2, computed independently of this code base (REFERENCE §6:
/// sha256 of the canonical JSON of `{"providers", "workspace"}`, sorted keys, no whitespace):
///
/// ```sh
/// python3 -c 'import json,hashlib; m=json.load(open("manifests/load-manifest.v2.json"));
///   s=json.dumps({"providers":m["providers"],"workspace":m["workspace"]},sort_keys=True,
///   separators=(",",":")); print("sha256:"+hashlib.sha256(s.encode()).hexdigest())'
/// ```
///
/// Python's `sort_keys` matches RFC 8785 ordering here (every key is ASCII) and its integers and
/// short decimals (`0.75`) print as RFC 8785 does. The same value was found by the spec audit's
/// independent computation.
const V2_PROFILE_DIGEST: &str =
    "sha256:6450608950279cd12535b3cfd9b37bf21e556ae4510fb70819933ed61a5d6941";

/// Manifest v2 with `openMs` and `halfOpenMaxCalls` deleted from both provider breakers, digested
/// the same independent way (the python above after
/// `del p["circuitBreaker"]["openMs"]; del p["circuitBreaker"]["halfOpenMaxCalls"]` for every
/// provider `p`). The reference hashes the document as written, so omitted defaults stay omitted.
const V2_WITHOUT_BREAKER_DEFAULTS_DIGEST: &str =
    "sha256:d194270d862630b77dab93550f33a6de895b9de297515274ccde86e0ce3bd9e3";

fn digest_of(file: &std::path::Path) -> String {
    let output = turnstile()
        .args(["profile", "digest"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[test]
fn profile_digest_of_the_v2_manifest_equals_the_independently_computed_value() {
    let printed = digest_of(&repo_file("manifests/load-manifest.v2.json"));
    assert_eq!(printed, V2_PROFILE_DIGEST);
}

/// Before the digest was defined on the profile as written, `openMs` 30000 and
/// `halfOpenMaxCalls` 1 were filled in before hashing, and this printed another value.
#[test]
fn profile_digest_keeps_omitted_breaker_defaults_omitted() {
    let text = std::fs::read_to_string(repo_file("manifests/load-manifest.v2.json")).unwrap();
    let written = r#""failureThreshold": 5, "openMs": 1000, "halfOpenMaxCalls": 1 }"#;
    assert_eq!(text.matches(written).count(), 2, "both provider breakers");
    let omitted = text.replace(written, r#""failureThreshold": 5 }"#);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("omitted.json");
    std::fs::write(&file, omitted).unwrap();
    assert_eq!(digest_of(&file), V2_WITHOUT_BREAKER_DEFAULTS_DIGEST);
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
