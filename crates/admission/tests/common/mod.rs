//! Helpers shared by the behaviour tests: spec-default limits, profiles and result unwrapping.
#![allow(dead_code)]

use turnstile_admission::{
    Acquired, AdmissionRequest, Controller, Lease, Limits, Profile, Rejection, Resolution, WaiterId,
};

pub const WORKSPACE: &str = "workspace";
pub const PRINCIPAL: &str = "authenticated-principal";

/// `limits(concurrency, maxQueueLength, maxQueueWaitMs)`.
pub fn limits(concurrency: u32, queue: u64, wait: u64) -> Limits {
    Limits {
        concurrency,
        max_queue_length: Some(queue),
        max_queue_wait_ms: Some(wait),
        ..Limits::default()
    }
}

/// The scheduler-admission default: concurrency 1, queue 8, wait 1000.
pub fn default_limits() -> Limits {
    limits(1, 8, 1000)
}

/// The same limits for the workspace, both providers and every named principal.
pub fn same_profile(limits: &Limits, principals: &[&str]) -> Profile {
    let mut profile = Profile {
        workspace: limits.clone(),
        ..Profile::default()
    };
    for provider in ["jev", "llm-subagent"] {
        profile.providers.insert(provider.into(), limits.clone());
    }
    for principal in principals {
        profile
            .principals
            .insert((*principal).into(), limits.clone());
    }
    profile
}

/// A controller at `now` whose scopes all use `limits`, knowing `principals`.
pub fn controller(limits: &Limits, principals: &[&str], now: u64) -> Controller {
    Controller::new(same_profile(limits, principals), now).expect("valid profile")
}

/// The default request of a principal on `jev`, deadline now + 10 s.
pub fn request(principal: &str, now: u64) -> AdmissionRequest {
    AdmissionRequest::new(principal, "jev", "invocation").with_deadline(now + 10_000)
}

#[track_caller]
pub fn admitted(result: Acquired) -> Lease {
    match result {
        Acquired::Admitted(lease) => lease,
        other => panic!("expected an admission, got {other:?}"),
    }
}

#[track_caller]
pub fn queued(result: Acquired) -> WaiterId {
    match result {
        Acquired::Queued { waiter, .. } => waiter,
        other => panic!("expected a queued request, got {other:?}"),
    }
}

#[track_caller]
pub fn rejected(result: Acquired) -> Rejection {
    match result {
        Acquired::Rejected(rejection) => rejection,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

pub fn drain(controller: &mut Controller) -> Vec<Resolution> {
    std::iter::from_fn(|| controller.poll_resolution()).collect()
}

/// The resolution of one waiter among those drained so far.
#[track_caller]
pub fn resolution_of(resolutions: &[Resolution], waiter: WaiterId) -> Result<Lease, Rejection> {
    resolutions
        .iter()
        .find(|r| r.waiter == waiter)
        .unwrap_or_else(|| panic!("waiter {waiter:?} was not resolved"))
        .outcome
        .clone()
}
