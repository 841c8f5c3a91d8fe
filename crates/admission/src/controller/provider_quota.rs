//! The controller's side of the provider's announced quota ([`crate::ProviderQuota`]): taking
//! an observation, holding a lane's heads to its windows, charging grants to them, and the
//! exact floor they put under a predicted wait.
//!
//! # What it decides
//!
//! - [`Controller::observe_provider_quota`] replaces the lane's windows of the kinds observed
//!   (the provider's count is authoritative) and pumps at once: a newer observation may free
//!   heads an older one held.
//! - tryAdmit (`admit.rs`) asks [`Controller::quota_deferral`] after the profile's own buckets
//!   passed: a spent request window holds the whole provider lane (`requests-per-minute`,
//!   blocked provider-wide), a token window too small for the head holds that head
//!   (`tokens-per-second`), each until the window's reset, the instant the pump wakes at.
//! - Every grant on the lane is charged to its live windows ([`Controller::quota_charge`]).
//! - Deadline-aware refusal counts a window's reset as an exact floor, like a pause
//!   ([`Controller::quota_floor`]).
//!
//! # Invariants
//!
//! - Without an observation the provider keeps no hold (`None`), and admission pays one branch.
//! - The deferral reasons stay in the existing vocabulary; the evidence of a waiter held this
//!   way carries `providerQuota: true`, never the account's figures.
//! - A provider the profile does not configure is refused (`UnknownProvider`); nothing is kept.

use crate::provider_quota::{ProviderQuota, QuotaHold};
use crate::time::Millis;

use super::admit::Attempt;
use super::{Controller, UnknownProvider};
use crate::binding::Binding;

impl Controller {
    /// The index of a provider the profile in force configures (a provider it does not is
    /// [`UnknownProvider`], and no state is kept for it). Shared by the host-driven lane
    /// events: Retry-After pauses and quota observations.
    pub(super) fn configured_provider(&self, provider_id: &str) -> Result<u32, UnknownProvider> {
        self.scopes
            .providers
            .find(provider_id)
            .filter(|&p| self.scopes.providers.limits(p).is_some())
            .ok_or(UnknownProvider)
    }

    /// Takes what a provider answer announced of the account's quota for the provider lane
    /// `provider_id` (see [`crate::ProviderQuota`]): until each announced reset, at most the
    /// announced remaining requests / estimated tokens are granted on the lane, on top of the
    /// profile's limits. A provider the profile does not configure is an error, and no state is
    /// kept for it.
    pub fn observe_provider_quota(
        &mut self,
        provider_id: &str,
        quota: &ProviderQuota,
        now: Millis,
    ) -> Result<(), UnknownProvider> {
        let now = self.advance(now);
        self.expire(now);
        let provider = self.configured_provider(provider_id)?;
        let extra = &mut self.scopes.providers[provider].extra;
        let hold = extra.quota.get_or_insert_with(Box::default);
        hold.observe(quota, now);
        if hold.is_empty() {
            extra.quota = None;
        }
        self.pump(now);
        self.note_peaks();
        Ok(())
    }

    /// The deferral the provider's announced quota puts on a head of `provider` asking for
    /// `tokens` at `now`, if any.
    #[inline]
    pub(super) fn quota_deferral(
        &self,
        provider: u32,
        tokens: u64,
        now: Millis,
    ) -> Option<Attempt> {
        let hold = self.scopes.providers[provider].extra.quota.as_deref()?;
        if let Some(until) = hold.requests_blocked(now) {
            return Some(Attempt::Defer {
                binding: Binding::ProviderQuotaRequests,
                wake: Some(until),
            });
        }
        hold.tokens_blocked(tokens, now)
            .map(|until| Attempt::Defer {
                binding: Binding::ProviderQuotaTokens,
                wake: Some(until),
            })
    }

    /// A grant of `tokens` on `provider` at `now`: charged to the lane's live windows.
    #[inline]
    pub(super) fn quota_charge(&mut self, provider: u32, tokens: u64, now: Millis) {
        let extra = &mut self.scopes.providers[provider].extra;
        if let Some(hold) = extra.quota.as_deref_mut() {
            hold.take(tokens, now);
            if hold.is_empty() {
                extra.quota = None;
            }
        }
    }

    /// The instant before which the announced windows of `provider` cannot let `grants` more
    /// grants (the last of `tokens`) pass, when they hold them back at `now`.
    pub(super) fn quota_floor(
        &self,
        provider: u32,
        grants: u64,
        tokens: u64,
        now: Millis,
    ) -> Option<Millis> {
        let hold: &QuotaHold = self.scopes.providers[provider].extra.quota.as_deref()?;
        hold.window_until(grants, tokens, now)
    }
}
