//! The controller's side of the providers' fair orders ([`crate::fair_order`]) and service
//! rates ([`crate::service_rate`]): which providers have an order, and the one place each lane
//! event (created, first waiter, emptied, granted, released, forgotten) reaches them.
//!
//! # Invariants
//!
//! - A provider has an order exactly when the profile in force asks for one: `"fairness":
//!   "tokens"` on the provider, or any principal with a weight other than 1 or a band other
//!   than `standard`. Without one, nothing here costs more than a branch: the ring's turns are
//!   the order, exactly as before token-fair scheduling existed.
//! - A lane with waiters is in its provider's order (when there is one) in its principal's
//!   band of the profile in force: a profile change empties the bands and enters every
//!   backlogged lane again (counters, virtual times and debts stay).
//! - A profile change, a breaker transition and a Retry-After pause are regime changes: the
//!   provider's service intervals are forgotten.

use crate::fair_order::{FairOrder, FairSlot};
use crate::lane::{LaneKey, LaneSlot};
use crate::limits::{Fairness, Limits, Priority};
use crate::scopes::ScopeTable;

use super::Controller;

/// A principal's weight in thousandths under the limits in force (1000 when none).
#[inline]
fn weight_milli(principals: &ScopeTable<()>, principal: u32) -> u64 {
    principals
        .limits(principal)
        .map_or(1000, Limits::weight_milli)
}

impl Controller {
    /// The slot of the lane `key`, creating it if needed (with the debt its principal still
    /// owes on that provider's order).
    #[inline]
    pub(super) fn lane_for(&mut self, key: LaneKey) -> LaneSlot {
        if let Some(slot) = self.lanes.find(key) {
            return slot;
        }
        let (provider, principal) = key;
        let fair = match self.scopes.providers[provider].extra.order.as_deref_mut() {
            Some(order) => order.restore(principal),
            None => FairSlot::default(),
        };
        self.lanes.insert(key, fair)
    }

    /// The lane got its first waiter: it enters its provider's order.
    #[inline]
    pub(super) fn order_enter(&mut self, slot: LaneSlot) {
        let Some(lane) = self.lanes.get_mut(slot) else {
            return;
        };
        let (provider, principal) = lane.key;
        if let Some(order) = self.scopes.providers[provider].extra.order.as_deref_mut() {
            let band = self
                .scopes
                .principals
                .limits(principal)
                .map_or(Priority::Standard, Limits::band);
            order.enter(slot, &mut lane.fair, band);
        }
    }

    /// The lane's FIFO emptied: it leaves its provider's order.
    #[inline]
    pub(super) fn order_leave(&mut self, slot: LaneSlot) {
        let Some(lane) = self.lanes.get_mut(slot) else {
            return;
        };
        let (provider, _) = lane.key;
        if let Some(order) = self.scopes.providers[provider].extra.order.as_deref_mut() {
            order.leave(slot, &mut lane.fair);
        }
    }

    /// A grant to the lane (its waiter already left it): charges the lane's counter and records
    /// the provider's service interval. Returns the service charged (0 without an order).
    #[inline]
    pub(super) fn order_grant(
        &mut self,
        slot: LaneSlot,
        tokens: Option<u64>,
        on_credit: bool,
    ) -> u128 {
        let Some(lane) = self.lanes.get_mut(slot) else {
            return 0;
        };
        let (provider, principal) = lane.key;
        let entry = &mut self.scopes.providers[provider];
        let waiting = entry.scope().queued > 0;
        let extra = &mut entry.extra;
        extra.rate.record_grant(self.now, waiting);
        let Some(order) = extra.order.as_deref_mut() else {
            return 0;
        };
        let weight = weight_milli(&self.scopes.principals, principal);
        let cost = order.cost(tokens, &lane.fair);
        order.charge(slot, &mut lane.fair, cost, weight, on_credit)
    }

    /// A released grant reported its actual tokens: the lane's charge is corrected.
    pub(super) fn order_correct(&mut self, slot: LaneSlot, charged: u128, actual_tokens: u64) {
        let Some(lane) = self.lanes.get_mut(slot) else {
            return;
        };
        let (provider, principal) = lane.key;
        let Some(order) = self.scopes.providers[provider].extra.order.as_deref_mut() else {
            return;
        };
        let weight = weight_milli(&self.scopes.principals, principal);
        order.correct(slot, &mut lane.fair, charged, actual_tokens, weight);
    }

    /// Forgets the lane in `slot` if it is idle, keeping what it owes in its provider's order.
    pub(super) fn forget_lane_if_idle(&mut self, slot: LaneSlot) {
        if let Some(lane) = self.lanes.remove_if_idle(slot) {
            let (provider, principal) = lane.key;
            if let Some(order) = self.scopes.providers[provider].extra.order.as_deref_mut() {
                order.forget(principal, &lane.fair);
            }
        }
    }

    /// The provider's regime changed (breaker transition, pause): its service intervals say
    /// nothing about what comes next.
    pub(super) fn regime_changed(&mut self, provider: u32) {
        if (provider as usize) < self.scopes.providers.len() {
            self.scopes.providers[provider].extra.rate.reset();
        }
    }

    /// Puts the profile in force's orders in place (after the scopes were installed): creates,
    /// reconfigures or drops each provider's order, and enters every backlogged lane again.
    pub(super) fn install_orders(&mut self) {
        let shaped = self.profile.principals.values().any(Limits::shapes_order);
        let shares = self.profile.workspace.min_share.unwrap_or_default();
        for provider in 0..self.scopes.providers.len() as u32 {
            let entry = &mut self.scopes.providers[provider];
            let mode = entry
                .limits
                .as_deref()
                .and_then(|l| l.fairness)
                .unwrap_or_default();
            let extra = &mut entry.extra;
            extra.rate.reset();
            if mode == Fairness::Tokens || shaped {
                match extra.order.as_deref_mut() {
                    Some(order) => {
                        order.configure(mode, &shares);
                        order.clear_bands();
                    }
                    None => extra.order = Some(Box::new(FairOrder::new(mode, &shares))),
                }
            } else {
                extra.order = None;
            }
        }
        for lane in self.lanes.iter_mut() {
            lane.fair.forget_place();
        }
        for slot in self.lanes.backlogged() {
            self.order_enter(slot);
        }
    }
}
