//! The handoff set-up shared by `benches/admission.rs` and `benches/handoff_ratio.rs`: a
//! controller with one principal per lane, workspace concurrency 1, one lease held and one
//! waiter queued in every lane, so each release hands the permit to the next lane's head.
//! `benches/scale.rs` takes its profile from here too.

// Each bench uses its own part of this module.
#![allow(dead_code)]

use turnstile_admission::{
    Acquired, AdmissionRequest, Controller, Estimate, Fairness, Lease, Limits, Outcome, Profile,
};

/// Limits that never bind but configure every bucket (the principal's state is its largest).
pub fn wide_limits(concurrency: u32) -> Limits {
    Limits {
        concurrency,
        requests_per_minute: Some(u64::from(u32::MAX)),
        tokens_per_second: Some(u64::from(u32::MAX)),
        max_queue_length: Some(10_000_000),
        ..Limits::default()
    }
}

/// One provider `jev`, `principals` principals `p0…`, all under [`wide_limits`].
pub fn profile(workspace_concurrency: u32, principals: usize) -> Profile {
    profile_in(Fairness::Requests, workspace_concurrency, principals)
}

/// [`profile`] with the provider's turns fair in `fairness` (`Requests` is written as absent,
/// as an existing profile has it).
pub fn profile_in(fairness: Fairness, workspace_concurrency: u32, principals: usize) -> Profile {
    let mut profile = Profile {
        workspace: wide_limits(workspace_concurrency),
        ..Profile::default()
    };
    let mut provider = wide_limits(workspace_concurrency);
    provider.fairness = (fairness == Fairness::Tokens).then_some(Fairness::Tokens);
    profile.providers.insert("jev".into(), provider);
    for i in 0..principals {
        profile.principals.insert(format!("p{i}"), wide_limits(4));
    }
    profile
}

/// An attempt of `principal` on `jev` estimating 100 tokens.
pub fn request(principal: &str) -> AdmissionRequest {
    AdmissionRequest::new(principal, "jev", "invocation").with_estimate(Estimate::new().tokens(100))
}

/// A controller with `lanes` principals, one lease held and one waiter per lane, and the
/// principals' names (to re-queue a waiter after each handoff).
pub struct Handoffs {
    controller: Controller,
    lease: Lease,
    names: Vec<String>,
    next: usize,
}

impl Handoffs {
    pub fn new(lanes: usize) -> Self {
        Self::in_mode(Fairness::Requests, lanes)
    }

    /// [`Handoffs::new`] on a provider fair in `fairness`.
    pub fn in_mode(fairness: Fairness, lanes: usize) -> Self {
        let names: Vec<String> = (0..lanes).map(|i| format!("p{i}")).collect();
        let mut controller = Controller::new(profile_in(fairness, 1, lanes), 0).expect("profile");
        let Acquired::Admitted(lease) = controller.acquire(request(&names[0]), 0) else {
            panic!("first request must be admitted");
        };
        for name in &names {
            let Acquired::Queued { .. } = controller.acquire(request(name), 0) else {
                panic!("lane waiters must queue");
            };
        }
        Handoffs {
            controller,
            lease,
            names,
            next: 0,
        }
    }

    /// The timed part: the release and the handoff it performs.
    #[inline]
    pub fn hand_off(&mut self) {
        self.controller.release(self.lease.id, Outcome::Success, 0);
        let resolution = self
            .controller
            .poll_resolution()
            .expect("a waiter is admitted");
        self.lease = resolution.outcome.expect("admitted");
    }

    /// The untimed part: a new waiter for the lane just served keeps every lane holding one.
    #[inline]
    pub fn requeue(&mut self) {
        let name = &self.names[self.next % self.names.len()];
        self.next += 1;
        std::hint::black_box(self.controller.acquire(request(name), 0));
    }
}
