//! The order in which one provider lane serves its backlogged principals ([`FairOrder`]):
//! weighted fair queuing in tokens (or requests) with VTC's counters, in priority bands with
//! minimum shares.
//!
//! # What it decides
//!
//! The ring ([`crate::ring`]) still hands out the provider's turns, one entry per backlogged
//! principal lane, so the split between providers is unchanged. A provider with an order uses
//! each turn for the principal lane [`FairOrder::pick`] names instead of the lane whose entry
//! came up:
//!
//! - **Band.** The highest band with an eligible waiter, unless a lower band holds a credit of
//!   a whole grant: after every grant of the provider, each band below the highest waiting one
//!   gains its `minShare` (in thousandths, capped at one grant plus its share); a band served
//!   on credit pays one grant; a band whose lanes empty drops its credit (no banking while
//!   idle). So while a lower band waits it receives at least its `minShare` of the grants, and
//!   strict priority never starves it.
//! - **Principal, within the band.** The lane with the least *counter*: service received
//!   divided by weight (`cost × K / weight`, cost = estimated tokens in token mode, 1 in
//!   requests mode). A grant charges its cost; the release corrects it with the actual tokens
//!   ([`FairOrder::correct`]). Ties go to the lane that (re)entered the order first: the key is
//!   `(counter, seq)`, `seq` taken at each (re)insert, so equal counters are served in turn.
//! - **Lift** (VTC): a lane entering the order starts at `max(own, v, least waiting)`, where `v`
//!   is the band's virtual time (the counter of its last grant at the moment of that grant):
//!   idle time earns no credit. A lane forgotten while its counter is above `v` keeps that
//!   debt ([`FairOrder::forget`], [`FairOrder::restore`]); a refund that arrives while a lane
//!   is idle dies at the next lift.
//!
//! # Invariants
//!
//! - A lane is in its band's heap exactly when its [`FairSlot`] holds a key, and then exactly
//!   once, under that key; the controller enters a lane when its FIFO goes from empty to
//!   non-empty and takes it out when it empties.
//! - Counters are integers (`u128` fixed point, no floats): the order is the same on every
//!   machine.
//! - `credit` of a band with no lane in its heap is 0.
//!
//! # Complexity
//!
//! n = backlogged principal lanes of the provider in one band. Enter, leave, rekey: O(log n)
//! (a B-tree of 32-byte keys). A pick reads the first eligible key of at most three bands:
//! O(1 + lanes skipped as ineligible in this pump pass); a lane is skipped when its principal is
//! at a cap or its head was deferred in the pass, each found at most once per pass by the pump.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use crate::lane::LaneSlot;
use crate::limits::{Fairness, MinShare, Priority};

/// The service one unit of cost adds to the counter of a lane of weight 1 (weights are in
/// thousandths: `K / weight_milli`).
const K: u128 = 1000 << 20;

/// One grant, in the credits' thousandths.
const GRANT: u32 = 1000;

/// Debts kept beyond this many are pruned of those the bands' virtual times have overtaken.
const DEBTS_PRUNE_AT: usize = 4096;

/// A lane's place in its provider's order.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FairSlot {
    /// Weighted service received (`K / weight` per unit of cost).
    pub(crate) counter: u128,
    /// The key under which the lane sits in its band's heap, while it is there.
    key: Option<(u128, u64)>,
    /// The band the lane was entered in.
    band: u8,
    /// The mean actual tokens of its calls (charged when a request has no token estimate).
    mean_tokens: u64,
}

impl FairSlot {
    /// Forgets the lane's place (its band was emptied, or the order dropped); the counter stays.
    pub(crate) fn forget_place(&mut self) {
        self.key = None;
    }

    /// Whether the lane is in its provider's order.
    #[cfg(test)]
    pub(crate) fn in_order(&self) -> bool {
        self.key.is_some()
    }
}

#[derive(Debug, Default)]
struct Band {
    /// Virtual time: the counter of the band's last grant, when it was made.
    v: u128,
    heap: BTreeSet<(u128, u64, LaneSlot)>,
    /// Grants owed to this band, in thousandths.
    credit: u32,
}

/// What [`FairOrder::pick`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pick {
    pub(crate) lane: LaneSlot,
    /// Served on its band's credit rather than as the highest waiting band.
    pub(crate) on_credit: bool,
}

/// One provider lane's order; see the module docs.
#[derive(Debug)]
pub(crate) struct FairOrder {
    mode: Fairness,
    /// Each band's share of grants while a higher band waits, in thousandths.
    shares: [u32; 3],
    bands: [Band; 3],
    seq: u64,
    /// Counters of forgotten lanes that owed service, by principal index.
    debts: FxHashMap<u32, u128>,
}

/// The service `cost` units add to a lane of weight `weight_milli` thousandths.
#[inline]
fn service(cost: u64, weight_milli: u64) -> u128 {
    u128::from(cost) * (K / u128::from(weight_milli.max(1)))
}

impl FairOrder {
    pub(crate) fn new(mode: Fairness, shares: &MinShare) -> Self {
        let mut order = FairOrder {
            mode,
            shares: [0; 3],
            bands: Default::default(),
            seq: 0,
            debts: FxHashMap::default(),
        };
        order.configure(mode, shares);
        order
    }

    /// Takes the (possibly new) mode and shares of the profile in force.
    pub(crate) fn configure(&mut self, mode: Fairness, shares: &MinShare) {
        self.mode = mode;
        for band in Priority::ALL {
            self.shares[band.rank()] = shares.permille(band);
        }
    }

    /// The cost of one grant: its token estimate in token mode (the lane's mean actual tokens
    /// when it has none, at least 1), 1 in requests mode.
    #[inline]
    pub(crate) fn cost(&self, tokens: Option<u64>, slot: &FairSlot) -> u64 {
        match self.mode {
            Fairness::Requests => 1,
            Fairness::Tokens => tokens.unwrap_or(slot.mean_tokens).max(1),
        }
    }

    /// Puts a lane that just got its first waiter into its band, lifted (see the module docs).
    #[inline]
    pub(crate) fn enter(&mut self, lane: LaneSlot, slot: &mut FairSlot, band: Priority) {
        if slot.key.is_some() {
            return;
        }
        let rank = band.rank();
        let entry = &mut self.bands[rank];
        let least = entry.heap.first().map_or(0, |&(counter, _, _)| counter);
        slot.counter = slot.counter.max(entry.v).max(least);
        slot.band = rank as u8;
        self.seq += 1;
        slot.key = Some((slot.counter, self.seq));
        entry.heap.insert((slot.counter, self.seq, lane));
    }

    /// Takes a lane whose FIFO emptied out of the order.
    #[inline]
    pub(crate) fn leave(&mut self, lane: LaneSlot, slot: &mut FairSlot) {
        if let Some((counter, seq)) = slot.key.take() {
            let band = &mut self.bands[usize::from(slot.band)];
            band.heap.remove(&(counter, seq, lane));
            if band.heap.is_empty() {
                band.credit = 0;
            }
        }
    }

    /// The lane the provider's next turn goes to, among the lanes `eligible` accepts; `None`
    /// when no lane of any band is eligible.
    #[inline]
    pub(crate) fn pick(&self, mut eligible: impl FnMut(LaneSlot) -> bool) -> Option<Pick> {
        let mut first = [None; 3];
        let mut top = None;
        for (rank, band) in self.bands.iter().enumerate() {
            if band.heap.is_empty() {
                continue;
            }
            first[rank] = band
                .heap
                .iter()
                .map(|&(_, _, lane)| lane)
                .find(|&lane| eligible(lane));
            if top.is_none() && first[rank].is_some() {
                top = Some(rank);
            }
        }
        let top = top?;
        // A lower band holding a whole grant of credit goes first, the lowest first.
        for rank in (top + 1..3).rev() {
            if let (Some(lane), true) = (first[rank], self.bands[rank].credit >= GRANT) {
                return Some(Pick {
                    lane,
                    on_credit: true,
                });
            }
        }
        first[top].map(|lane| Pick {
            lane,
            on_credit: false,
        })
    }

    /// Charges a grant of `cost` to the lane (after its waiter left it: the lane is still in
    /// the order exactly when it has more waiters); returns the service charged, which the
    /// release corrects. Moves the bands' credits.
    #[inline]
    pub(crate) fn charge(
        &mut self,
        lane: LaneSlot,
        slot: &mut FairSlot,
        cost: u64,
        weight_milli: u64,
        on_credit: bool,
    ) -> u128 {
        let rank = usize::from(slot.band);
        let charged = service(cost, weight_milli);
        {
            let band = &mut self.bands[rank];
            band.v = band.v.max(slot.counter);
        }
        slot.counter = slot.counter.saturating_add(charged);
        if let Some((counter, seq)) = slot.key {
            let band = &mut self.bands[rank];
            band.heap.remove(&(counter, seq, lane));
            self.seq += 1;
            slot.key = Some((slot.counter, self.seq));
            band.heap.insert((slot.counter, self.seq, lane));
        }
        if on_credit {
            let band = &mut self.bands[rank];
            band.credit = band.credit.saturating_sub(GRANT);
        }
        // Every band below the highest waiting one gains its share of this grant.
        if let Some(highest) = self.bands.iter().position(|b| !b.heap.is_empty()) {
            for lower in highest + 1..3 {
                let share = self.shares[lower];
                let band = &mut self.bands[lower];
                if !band.heap.is_empty() {
                    band.credit = (band.credit + share).min(GRANT + share);
                }
            }
        }
        charged
    }

    /// Corrects a released grant's charge with what it actually cost (`actual` units at the
    /// lane's current weight): a refund or a debt. A lane in the order keeps its `seq`.
    pub(crate) fn correct(
        &mut self,
        lane: LaneSlot,
        slot: &mut FairSlot,
        charged: u128,
        actual: u64,
        weight_milli: u64,
    ) {
        if self.mode == Fairness::Tokens {
            slot.mean_tokens = if slot.mean_tokens == 0 {
                actual
            } else {
                (slot.mean_tokens.saturating_mul(7).saturating_add(actual)) / 8
            };
        }
        let actual = service(self.cost(Some(actual), slot), weight_milli);
        let counter = slot.counter.saturating_add(actual).saturating_sub(charged);
        if counter == slot.counter {
            return;
        }
        slot.counter = counter;
        if let Some((old, seq)) = slot.key {
            let band = &mut self.bands[usize::from(slot.band)];
            band.heap.remove(&(old, seq, lane));
            band.heap.insert((counter, seq, lane));
            slot.key = Some((counter, seq));
        }
    }

    /// A lane is being forgotten (idle): keeps its counter if it owes service.
    pub(crate) fn forget(&mut self, principal: u32, slot: &FairSlot) {
        if slot.counter > self.bands[usize::from(slot.band)].v {
            self.debts.insert(principal, slot.counter);
            if self.debts.len() > DEBTS_PRUNE_AT {
                let floor = self.bands.iter().map(|b| b.v).min().unwrap_or(0);
                self.debts.retain(|_, &mut counter| counter > floor);
            }
        }
    }

    /// The counter a newly created lane of `principal` starts from (its debt, or 0).
    pub(crate) fn restore(&mut self, principal: u32) -> FairSlot {
        FairSlot {
            counter: self.debts.remove(&principal).unwrap_or(0),
            ..FairSlot::default()
        }
    }

    /// Empties every band (their lanes are entered again under the profile now in force);
    /// counters, virtual times and debts stay.
    pub(crate) fn clear_bands(&mut self) {
        for band in &mut self.bands {
            band.heap.clear();
            band.credit = 0;
        }
    }

    /// Backlogged lanes in the order.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.bands.iter().map(|b| b.heap.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(mode: Fairness) -> FairOrder {
        FairOrder::new(mode, &MinShare::default())
    }

    /// Serves `grants` turns among always-backlogged lanes with the given costs and weights;
    /// returns the lanes served, in order.
    fn serve(order: &mut FairOrder, lanes: &mut [(FairSlot, u64, u64)], grants: usize) -> Vec<u32> {
        for (i, (slot, _, _)) in lanes.iter_mut().enumerate() {
            order.enter(i as u32, slot, Priority::Standard);
        }
        (0..grants)
            .map(|_| {
                let pick = order.pick(|_| true).unwrap();
                let (slot, tokens, weight) = &mut lanes[pick.lane as usize];
                let cost = order.cost(Some(*tokens), slot);
                order.charge(pick.lane, slot, cost, *weight, pick.on_credit);
                pick.lane
            })
            .collect()
    }

    #[test]
    fn equal_costs_alternate_in_entry_order() {
        let mut order = order(Fairness::Tokens);
        let mut lanes = [
            (FairSlot::default(), 100, 1000),
            (FairSlot::default(), 100, 1000),
        ];
        assert_eq!(serve(&mut order, &mut lanes, 6), [0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn ten_times_smaller_calls_get_ten_grants_per_large_one() {
        let mut order = order(Fairness::Tokens);
        let mut lanes = [
            (FairSlot::default(), 4000, 1000),
            (FairSlot::default(), 400, 1000),
        ];
        let served = serve(&mut order, &mut lanes, 22);
        let light = served.iter().filter(|&&l| l == 1).count();
        assert_eq!(light, 20, "{served:?}");
    }

    #[test]
    fn requests_mode_counts_grants_and_weights_scale_them() {
        let mut order = order(Fairness::Requests);
        let mut lanes = [
            (FairSlot::default(), 4000, 1000),
            (FairSlot::default(), 400, 2000),
        ];
        let served = serve(&mut order, &mut lanes, 30);
        let double = served.iter().filter(|&&l| l == 1).count();
        assert_eq!(double, 20, "weight 2 gets twice the grants: {served:?}");
    }

    #[test]
    fn a_returning_lane_is_lifted_and_cannot_bank_idle_time() {
        let mut order = order(Fairness::Tokens);
        let (mut busy, mut idle) = (FairSlot::default(), FairSlot::default());
        order.enter(0, &mut busy, Priority::Standard);
        for _ in 0..10 {
            order.charge(0, &mut busy, 100, 1000, false);
        }
        order.enter(1, &mut idle, Priority::Standard);
        assert_eq!(
            idle.counter, busy.counter,
            "lifted to the least waiting counter"
        );
        assert!(idle.counter >= order.bands[1].v);
        assert!(idle.in_order() && order.len() == 2);
    }

    #[test]
    fn a_debt_survives_forgetting_and_a_refund_while_idle_dies_at_the_lift() {
        let mut order = order(Fairness::Tokens);
        let mut slot = FairSlot::default();
        order.enter(7, &mut slot, Priority::Standard);
        let charged = order.charge(7, &mut slot, 1, 1000, false);
        order.leave(7, &mut slot);
        order.correct(7, &mut slot, charged, 4000, 1000);
        let owed = slot.counter;
        order.forget(3, &slot);
        assert_eq!(order.restore(3).counter, owed, "the debt is kept");
        assert_eq!(order.restore(3).counter, 0, "and handed out once");
    }

    #[test]
    fn a_waiting_batch_band_gets_its_min_share_of_grants() {
        let mut order = order(Fairness::Requests);
        let (mut hot, mut batch) = (FairSlot::default(), FairSlot::default());
        order.enter(0, &mut hot, Priority::Interactive);
        order.enter(1, &mut batch, Priority::Batch);
        let mut batch_grants = Vec::new();
        for grant in 0..1000 {
            let pick = order.pick(|_| true).unwrap();
            let slot = if pick.lane == 0 { &mut hot } else { &mut batch };
            order.charge(pick.lane, slot, 1, 1000, pick.on_credit);
            if pick.lane == 1 {
                batch_grants.push(grant);
            }
        }
        // Its credit fills in the first 10 grants; from then on one grant in every 10.
        assert_eq!(batch_grants.len(), 99, "{batch_grants:?}");
        assert_eq!(batch_grants[0], 10);
        assert!(batch_grants.windows(2).all(|w| w[1] - w[0] == 10));
    }

    #[test]
    fn ineligible_lanes_are_skipped_and_an_empty_band_drops_its_credit() {
        let mut order = order(Fairness::Tokens);
        let (mut a, mut b) = (FairSlot::default(), FairSlot::default());
        order.enter(0, &mut a, Priority::Interactive);
        order.enter(1, &mut b, Priority::Batch);
        for _ in 0..20 {
            order.charge(0, &mut a, 10, 1000, false);
        }
        assert!(order.bands[2].credit >= GRANT);
        assert_eq!(order.pick(|lane| lane == 0).map(|p| p.lane), Some(0));
        assert_eq!(order.pick(|_| false), None);
        order.leave(1, &mut b);
        assert_eq!(order.bands[2].credit, 0);
    }
}
