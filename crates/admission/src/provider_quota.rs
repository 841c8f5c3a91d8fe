//! The provider's own quota, as one answer of the provider announced it ([`ProviderQuota`]), and
//! the hold it puts on a provider lane ([`QuotaHold`]).
//!
//! # What it decides
//!
//! A provider answer may say how many requests and tokens the account has left and when that
//! count resets (OpenAI's `x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*` headers: the
//! proxy reads them, `turnstile-proxy`'s `quota_headers.rs`). The host hands that to the
//! controller of the lane's workspace as an observation (`Controller::observe_provider_quota`).
//! The lane then keeps, per kind, the announced *window*: until `now + resets_in_ms` at most
//! `remaining` more grants (requests) or estimated tokens (tokens) pass; every grant on the
//! lane takes from it; once it is spent, heads wait until the reset (a known instant), and then
//! the window lapses and only the profile's limits apply again.
//!
//! # Invariants
//!
//! - A window only ever *holds back*: it never admits what the profile's own limits (buckets,
//!   concurrency, budgets) would defer. It is checked on top of them.
//! - A newer observation of a kind replaces the older one (the provider's count is
//!   authoritative); a kind the new observation does not carry keeps its window.
//! - A window whose reset has come holds nothing ([`QuotaHold::window_until`] is `None` for it)
//!   and is dropped the next time the lane is charged or observed.
//! - The figures are the account's: they never appear in evidence, which only says that a call
//!   was held by the provider's quota (`providerQuota`).

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// One kind of the provider's quota (requests, or tokens) as an answer announced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaWindow {
    /// How many more units the provider will accept before the reset.
    pub remaining: u64,
    /// How long until the count resets, from the instant the observation is made.
    pub resets_in_ms: Millis,
    /// The announced limit (the window's capacity), when the provider sent it. Kept for
    /// operators; the hold uses `remaining` and `resets_in_ms` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// What one provider answer announced of the account's quota. Absent kinds were not announced
/// (absent is never zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderQuota {
    /// The request window (`x-ratelimit-*-requests`, `anthropic-ratelimit-requests-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<QuotaWindow>,
    /// The token window (`x-ratelimit-*-tokens`, `anthropic-ratelimit-tokens-*` or the tighter
    /// of its input and output windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<QuotaWindow>,
}

impl ProviderQuota {
    /// Whether the answer announced nothing.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }
}

/// What is left of one announced window on a lane: `left` units until `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) left: u64,
    pub(crate) until: Millis,
}

impl Held {
    fn of(window: &QuotaWindow, now: Millis) -> Option<Held> {
        (window.resets_in_ms > 0).then(|| Held {
            left: window.remaining,
            until: now.saturating_add(window.resets_in_ms),
        })
    }

    /// The instant `need` units can pass, if the window holds them back at `now`.
    fn blocks(&self, need: u64, now: Millis) -> Option<Millis> {
        (now < self.until && need > self.left).then_some(self.until)
    }

    fn live(held: Option<Held>, now: Millis) -> Option<Held> {
        held.filter(|h| now < h.until)
    }
}

/// The windows a provider lane is held to (kept boxed in the provider's state, present only
/// while some window was observed: the admission path pays one branch when none is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct QuotaHold {
    pub(crate) requests: Option<Held>,
    pub(crate) tokens: Option<Held>,
}

impl QuotaHold {
    /// Applies an observation made at `now`: each announced kind replaces its window.
    pub(crate) fn observe(&mut self, quota: &ProviderQuota, now: Millis) {
        if let Some(window) = &quota.requests {
            self.requests = Held::of(window, now);
        }
        if let Some(window) = &quota.tokens {
            self.tokens = Held::of(window, now);
        }
        self.lapse(now);
    }

    /// Drops the windows whose reset has come.
    fn lapse(&mut self, now: Millis) {
        self.requests = Held::live(self.requests, now);
        self.tokens = Held::live(self.tokens, now);
    }

    /// Whether no window is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }

    /// The request window's reset, when it holds one more grant back at `now`.
    pub(crate) fn requests_blocked(&self, now: Millis) -> Option<Millis> {
        self.requests.and_then(|h| h.blocks(1, now))
    }

    /// The token window's reset, when it holds a grant of `tokens` back at `now`.
    pub(crate) fn tokens_blocked(&self, tokens: u64, now: Millis) -> Option<Millis> {
        self.tokens.and_then(|h| h.blocks(tokens, now))
    }

    /// The reset of a window that holds back `grants` more grants (requests) or a grant of
    /// `tokens` at `now`: the exact floor of a wait for them.
    pub(crate) fn window_until(&self, grants: u64, tokens: u64, now: Millis) -> Option<Millis> {
        let requests = self.requests.and_then(|h| h.blocks(grants, now));
        let tokens = self.tokens.and_then(|h| h.blocks(tokens, now));
        requests.max(tokens)
    }

    /// One grant of `tokens` passed at `now`: taken from the live windows.
    pub(crate) fn take(&mut self, tokens: u64, now: Millis) {
        self.lapse(now);
        if let Some(held) = &mut self.requests {
            held.left = held.left.saturating_sub(1);
        }
        if let Some(held) = &mut self.tokens {
            held.left = held.left.saturating_sub(tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(remaining: u64, resets_in_ms: Millis) -> Option<QuotaWindow> {
        Some(QuotaWindow {
            remaining,
            resets_in_ms,
            limit: None,
        })
    }

    #[test]
    fn a_window_holds_until_its_reset_then_lapses() {
        let mut hold = QuotaHold::default();
        hold.observe(
            &ProviderQuota {
                requests: window(1, 2_000),
                tokens: window(100, 1_000),
            },
            10_000,
        );
        assert_eq!(hold.requests_blocked(10_000), None);
        assert_eq!(hold.tokens_blocked(100, 10_000), None);
        assert_eq!(hold.tokens_blocked(101, 10_000), Some(11_000));
        hold.take(60, 10_000);
        assert_eq!(hold.requests_blocked(10_500), Some(12_000));
        assert_eq!(hold.tokens_blocked(41, 10_500), Some(11_000));
        assert_eq!(hold.window_until(1, 0, 10_500), Some(12_000));
        assert_eq!(
            hold.requests_blocked(12_000),
            None,
            "the reset lets it pass"
        );
        hold.take(1, 12_000);
        assert!(hold.is_empty(), "both windows lapsed");
    }

    #[test]
    fn a_newer_observation_replaces_only_the_kinds_it_carries() {
        let mut hold = QuotaHold::default();
        hold.observe(
            &ProviderQuota {
                requests: window(0, 5_000),
                tokens: window(0, 5_000),
            },
            0,
        );
        hold.observe(
            &ProviderQuota {
                requests: window(3, 1_000),
                tokens: None,
            },
            100,
        );
        assert_eq!(hold.requests_blocked(100), None);
        assert_eq!(hold.tokens_blocked(1, 100), Some(5_000));
        // A zero reset announces no hold at all.
        hold.observe(
            &ProviderQuota {
                requests: window(0, 0),
                tokens: window(0, 0),
            },
            200,
        );
        assert!(hold.is_empty());
    }
}
