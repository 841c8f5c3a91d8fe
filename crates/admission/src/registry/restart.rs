//! The registry's restart entry points: a host that journals grants puts back what a previous
//! process charged, granted, paused and left in its buckets, after it replayed the
//! registrations. None of them decides, queues or emits anything (see `registry.rs`).

use std::collections::BTreeMap;

use super::Registry;
use crate::breaker::BreakerTransition;
use crate::controller::{BucketLevels, Charge, LeaseCharge, ReinstateError};
use crate::evidence::LeaseId;
use crate::time::Millis;

impl Registry {
    /// Puts back an invocation's spend on one lane after a restart
    /// ([`Controller::restore_spend`]).
    pub fn restore_spend(
        &mut self,
        workspace_id: &str,
        budget_id: &str,
        principal_id: &str,
        provider_id: &str,
        spent: Charge,
        now: Millis,
    ) -> Result<(), ReinstateError> {
        self.workspaces
            .get_mut(workspace_id)
            .ok_or(ReinstateError::UnknownWorkspace)?
            .controller
            .restore_spend(budget_id, principal_id, provider_id, spent, now)
    }

    /// Puts back a lease a previous process granted ([`Controller::reinstate`]); returns its
    /// new ID in the workspace's controller.
    pub fn reinstate(
        &mut self,
        workspace_id: &str,
        principal_id: &str,
        lease: &LeaseCharge,
        now: Millis,
    ) -> Result<LeaseId, ReinstateError> {
        self.workspaces
            .get_mut(workspace_id)
            .ok_or(ReinstateError::UnknownWorkspace)?
            .controller
            .reinstate(principal_id, lease, now)
    }

    /// Pauses a provider lane of a workspace again until `until` after a restart
    /// ([`Controller::restore_pause`]); returns whether the pause is in force at `now`.
    pub fn restore_pause(
        &mut self,
        workspace_id: &str,
        provider_id: &str,
        until: Millis,
        now: Millis,
    ) -> Result<bool, ReinstateError> {
        let entry = self
            .workspaces
            .get_mut(workspace_id)
            .ok_or(ReinstateError::UnknownWorkspace)?;
        let restored = entry.controller.restore_pause(provider_id, until, now)?;
        self.reschedule(workspace_id);
        Ok(restored)
    }

    /// Opens a provider's breaker again as its last journaled transition left it
    /// ([`Controller::restore_breaker`]); returns whether it is open now.
    pub fn restore_breaker(
        &mut self,
        workspace_id: &str,
        last: &BreakerTransition,
        now: Millis,
    ) -> Result<bool, ReinstateError> {
        let entry = self
            .workspaces
            .get_mut(workspace_id)
            .ok_or(ReinstateError::UnknownWorkspace)?;
        let restored = entry.controller.restore_breaker(last, now)?;
        self.reschedule(workspace_id);
        Ok(restored)
    }

    /// Drains every rate bucket of every workspace as if empty at `since`, the last grant a
    /// previous process journaled ([`Controller::drain_buckets_since`]); returns how many
    /// buckets it lowered.
    pub fn drain_buckets_since(&mut self, since: Millis, now: Millis) -> usize {
        let mut lowered = 0;
        let ids: Vec<String> = self.workspaces.keys().cloned().collect();
        for id in ids {
            if let Some(entry) = self.workspaces.get_mut(&id) {
                lowered += entry.controller.drain_buckets_since(since, now);
            }
            self.reschedule(&id);
        }
        lowered
    }

    /// The level of every bucket of every workspace, read at `now`
    /// ([`Controller::bucket_levels`]), by workspace ID; changes nothing.
    pub fn bucket_levels(&self, now: Millis) -> BTreeMap<String, BucketLevels> {
        self.workspaces
            .iter()
            .map(|(id, entry)| (id.clone(), entry.controller.bucket_levels(now)))
            .collect()
    }

    /// Restores the bucket levels a clean stop read ([`Controller::restore_bucket_levels`]);
    /// a workspace the levels do not name starts with full buckets, one this registry does
    /// not know is skipped. Returns how many buckets were set.
    pub fn restore_bucket_levels(
        &mut self,
        levels: &BTreeMap<String, BucketLevels>,
        now: Millis,
    ) -> usize {
        let mut restored = 0;
        for (id, workspace) in levels {
            if let Some(entry) = self.workspaces.get_mut(id) {
                restored += entry.controller.restore_bucket_levels(workspace, now);
                self.reschedule(id);
            }
        }
        restored
    }
}
