//! Changing the profile of a running controller ([`Controller::set_profile`]).
//!
//! # Invariants
//!
//! - A profile that does not validate changes nothing.
//! - Queued work is revalidated at once, in arrival order: a waiter that can no longer pass
//!   preflight or can never fit under the new limits is rejected; every other waiter keeps its
//!   place and has its dwell bound recomputed from its own `enqueued_at`.
//! - Held leases are not touched: a lease granted under the old limits stays held until it is
//!   released.

use crate::profile::{Profile, ProfileError};
use crate::time::Millis;

use super::Controller;

impl Controller {
    /// Replaces the profile. Queued work is revalidated against it at once: a waiter that can no
    /// longer pass preflight or can never fit is rejected; dwell bounds are recomputed.
    pub fn set_profile(&mut self, profile: Profile, now: Millis) -> Result<(), ProfileError> {
        profile.validate()?;
        let now = self.advance(now);
        self.install_profile(profile);
        for slot in self.queue.slots_in_arrival_order() {
            let Some(waiter) = self.queue.get(slot) else {
                continue;
            };
            let (lane, deadline, estimate, enqueued_at) = (
                waiter.lane,
                waiter.deadline,
                waiter.estimate(),
                waiter.enqueued_at,
            );
            let verdict = self
                .preflight(lane, deadline, Some(estimate), now)
                .err()
                .or_else(|| self.never_fits(lane, &waiter.budget_id, &estimate));
            if let Some(reason) = verdict {
                self.resolve_rejected(slot, reason, None, now);
                continue;
            }
            let expires_at = self.expiry_for(lane, deadline, enqueued_at);
            self.queue.set_expiry(slot, expires_at);
        }
        self.expire(now);
        self.pump(now);
        self.note_peaks();
        Ok(())
    }

    /// Puts `profile` in force for every scope, without revalidating queued work.
    pub(super) fn install_profile(&mut self, profile: Profile) {
        self.scopes.install(&profile, self.now);
        self.profile = profile;
        self.install_orders();
    }
}
