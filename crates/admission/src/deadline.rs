//! The deadline rule: a request that is blocked (a provider pause, an open breaker) until an
//! instant at or after its deadline is refused now, with the block's reason and how long it
//! lasts, instead of waiting only to run out.
//!
//! One rule for every host: the controller applies it to a lane's own pause and breaker
//! (`controller/admit.rs`), and the shell's shared admission step applies it to the pauses and
//! breakers of the limits shared across replicas (`turnstile-shell`, `shared.rs`). Both must
//! agree, or a replica would queue a request the core refuses (or the reverse).
//!
//! Invariant: a block that ends exactly at the deadline outlasts it (the request could only be
//! admitted at an instant its caller has already given up at).

use crate::time::Millis;

/// Whether a block that ends at `until` outlasts a request's `deadline`, so that the request
/// is refused now rather than left to wait.
#[inline]
pub fn block_outlasts_deadline(until: Millis, deadline: Millis) -> bool {
    until >= deadline
}

#[cfg(test)]
mod tests {
    use super::block_outlasts_deadline;

    #[test]
    fn a_block_ending_at_or_after_the_deadline_outlasts_it() {
        assert!(block_outlasts_deadline(100, 100));
        assert!(block_outlasts_deadline(101, 100));
        assert!(!block_outlasts_deadline(99, 100));
    }
}
