//! Release builds of the `turnstile` binary on Linux compress their debug sections at link
//! time (`--compress-debug-sections=zlib`, GNU ld and lld): the line tables stay in the binary,
//! so backtraces keep file:line and profilers resolve lines (both read zlib-compressed DWARF),
//! at about a third of the size. Debug builds are left alone (faster links).
//!
//! The commit the binary is built from becomes `TURNSTILE_COMMIT` (`turnstile --version`
//! prints it): `TURNSTILE_COMMIT` from the build's environment when set (a build from a source
//! tree without `.git`, e.g. a container build), else `git rev-parse --short=12 HEAD`, else
//! `unknown`. (No `-dirty` mark: asking git about the work tree refreshes its index, which
//! would make every build rerun this script.)
use std::path::PathBuf;
use std::process::Command;

/// What `git ARGS` prints, trimmed, when it runs and succeeds.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn commit() -> String {
    println!("cargo:rerun-if-env-changed=TURNSTILE_COMMIT");
    if let Some(commit) = std::env::var("TURNSTILE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
    {
        return commit;
    }
    // Rebuild when HEAD moves: the HEAD file, the branch's ref and the packed refs.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        let dir = PathBuf::from(dir);
        let common = git(&["rev-parse", "--git-common-dir"]).map_or(dir.clone(), PathBuf::from);
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        println!(
            "cargo:rerun-if-changed={}",
            common.join("packed-refs").display()
        );
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", common.join(branch).display());
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
        .filter(|commit| !commit.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-env=TURNSTILE_COMMIT={}", commit());
    let release = std::env::var("PROFILE").is_ok_and(|profile| profile == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if release && linux {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
