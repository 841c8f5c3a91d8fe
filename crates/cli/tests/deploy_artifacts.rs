//! The deployment artifacts under `deploy/` and the `Dockerfile` start the real binary with
//! flags and configuration it accepts. (`.ci/run` checks the rest with their own tools:
//! `hadolint` for the Dockerfile, `kubernetes-validate` for the manifests, `systemd-analyze
//! verify` for the unit; `docs/deploy.md`.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The TOML held by the ConfigMap's `turnstile.toml` key (a YAML block scalar, 4 spaces in).
fn configmap_toml() -> String {
    let yaml = read("deploy/kubernetes/configmap.yaml");
    let mut lines = yaml
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("turnstile.toml: |"));
    lines
        .next()
        .expect("the ConfigMap has a turnstile.toml key");
    lines
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_configmap_holds_a_configuration_the_service_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turnstile.toml");
    std::fs::write(&path, configmap_toml()).unwrap();
    let config = turnstile_server::Config::load(&path).expect("the ConfigMap's TOML loads");
    config.validate().expect("and validates");
    assert_eq!(config.listen.port(), 8686);
    assert_eq!(config.data_dir, PathBuf::from("/data"));
    assert!(!config.demo, "no demo workspace in a deployment");
}

/// Every `serve` flag the Dockerfile, the unit and the Deployment pass is one `serve` has.
#[test]
fn the_artifacts_pass_flags_serve_accepts() {
    let help = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for (file, flags) in [
        ("Dockerfile", vec!["--listen", "--data"]),
        (
            "deploy/systemd/turnstile.service",
            vec!["--listen", "--data"],
        ),
        ("deploy/kubernetes/deployment.yaml", vec!["--config"]),
    ] {
        let text = read(file);
        for flag in flags {
            assert!(text.contains(flag), "{file} passes {flag}");
            assert!(help.contains(flag), "serve has {flag}");
        }
    }
    // The probes and the health check name the service's own endpoints.
    let deployment = read("deploy/kubernetes/deployment.yaml");
    assert!(deployment.contains("path: /readyz") && deployment.contains("path: /healthz"));
    assert!(read("Dockerfile").contains("/healthz"));
}

/// The Dockerfile's user owns `/data`, and the Deployment runs as that user.
#[test]
fn the_image_and_the_pods_run_as_the_same_non_root_user() {
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains("USER 10001:10001"));
    assert!(dockerfile.contains("--uid 10001"));
    let deployment = read("deploy/kubernetes/deployment.yaml");
    assert!(deployment.contains("runAsUser: 10001") && deployment.contains("runAsNonRoot: true"));
}
