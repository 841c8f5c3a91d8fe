//! `turnstile evaluate … --service URL --key KEY`: the evaluation governed by a running
//! service instead of an in-process registry.
//!
//! Decides how the two flags become the evaluation's [`SchedulerRun`]: a
//! [`RemoteGovernor`] on the Rust client, and a policy that enables the scheduler without
//! limits of its own (the service's workspace profile governs; the scheduler's ceiling is the
//! binding's `concurrency`). `--scheduler` is refused with `--service` (clap, exit 2): its
//! limits would be a second governor the service does not know.
//!
//! Invariant: the key is held as a [`Secret`] (`turnstile-client`), which prints as `***` (so
//! `Debug` of the arguments never shows it) and is handed only to the client's
//! `Authorization` header.

use std::collections::BTreeMap;

use anyhow::Context;
use turnstile_admission::Limits;
use turnstile_client::{Client, Secret};
use turnstile_decision::{RemoteGovernor, SchedulerPolicy, SchedulerRun, ScopeLimits};

use turnstile_cli::HintExt;

/// The scheduler run of an evaluation governed by the service at `service` with `key`.
pub fn governed(service: &str, key: &Secret) -> anyhow::Result<SchedulerRun> {
    let client = Client::new(service, key.expose())
        .context("--service/--key cannot be used")
        .hint("--service is the service's base URL, e.g. http://127.0.0.1:8080; --key (or TURNSTILE_KEY) a principal key of its workspace")?;
    let unlimited = || ScopeLimits {
        id: String::new(),
        limits: Limits::default(),
    };
    let policy = SchedulerPolicy {
        enabled: true,
        profile_version: "service".into(),
        caller_concurrency: None,
        graph_concurrency: None,
        workspace: unlimited(),
        principal: unlimited(),
        providers: BTreeMap::new(),
    };
    Ok(SchedulerRun::governed(policy, RemoteGovernor::new(client)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_never_prints_and_a_bad_url_is_an_error() {
        let key = Secret::new("tsk_secret");
        assert_eq!(format!("{key:?}"), "***");
        let refused = governed("localhost:8080", &key).expect_err("no scheme");
        assert!(!format!("{refused:#}").contains("tsk_secret"));
        let run = governed("http://127.0.0.1:8080", &key).expect("a run");
        assert!(!format!("{run:?}").contains("tsk_secret"));
        assert_eq!(run.policy.ceiling(3), 3);
    }
}
