//! [`Binding`]: which limit holds a queued lane back, one closed vocabulary.
//!
//! tryAdmit (`controller/admit.rs`) names the binding limit of every deferral; the waiter
//! keeps the last one (its `last_reason` is the binding's [`Binding::reason`]), and the lane
//! view (`controller/lanes.rs`) counts the heads of each provider's queued lanes by binding,
//! for the console's lanes view.
//!
//! # Invariants
//!
//! - A binding names a scope (principal, workspace, provider) and a kind of limit, never a
//!   principal, workspace or lane: safe in any answer.
//! - Each binding has exactly one [`Reason`] (the reason of the deferral it explains).
//! - Budgets never hold a waiter (a request a budget cannot cover is refused, not queued), so
//!   no binding names one.

use serde::{Deserialize, Serialize};

use crate::reason::Reason;

/// The limit that holds a queued lane's head back, as tryAdmit last found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Binding {
    /// The principal holds its `concurrency`.
    PrincipalConcurrency,
    /// The workspace holds its `concurrency`.
    WorkspaceConcurrency,
    /// The provider lane holds its `concurrency`.
    ProviderConcurrency,
    /// The principal holds its share of the workspace (`maxActiveShare`).
    WorkspaceShare,
    /// The principal holds its share of the provider lane (`maxActiveShare`).
    ProviderShare,
    /// The workspace's free permits are reserved for other principals.
    WorkspaceReservation,
    /// The provider lane's free permits are reserved for other principals.
    ProviderReservation,
    /// The principal's request bucket (`requestsPerMinute`) is empty.
    PrincipalRequests,
    /// The workspace's request bucket is empty.
    WorkspaceRequests,
    /// The provider lane's request bucket is empty.
    ProviderRequests,
    /// The principal's token bucket (`tokensPerSecond`) holds too few tokens.
    PrincipalTokens,
    /// The workspace's token bucket holds too few tokens.
    WorkspaceTokens,
    /// The provider lane's token bucket holds too few tokens.
    ProviderTokens,
    /// A Retry-After pause of the provider lane.
    ProviderPause,
    /// The provider lane's circuit breaker is open (or its probes are taken).
    ProviderBreaker,
    /// The provider's announced request quota is spent until its reset.
    ProviderQuotaRequests,
    /// The provider's announced token quota cannot hold the request until its reset.
    ProviderQuotaTokens,
}

impl Binding {
    /// Every binding, in tryAdmit's order of checks.
    pub const ALL: [Binding; 17] = [
        Binding::PrincipalConcurrency,
        Binding::WorkspaceConcurrency,
        Binding::ProviderConcurrency,
        Binding::WorkspaceShare,
        Binding::ProviderShare,
        Binding::WorkspaceReservation,
        Binding::ProviderReservation,
        Binding::PrincipalRequests,
        Binding::WorkspaceRequests,
        Binding::ProviderRequests,
        Binding::PrincipalTokens,
        Binding::WorkspaceTokens,
        Binding::ProviderTokens,
        Binding::ProviderPause,
        Binding::ProviderBreaker,
        Binding::ProviderQuotaRequests,
        Binding::ProviderQuotaTokens,
    ];

    /// The reason of the deferral it explains.
    pub const fn reason(self) -> Reason {
        match self {
            Binding::PrincipalConcurrency
            | Binding::WorkspaceConcurrency
            | Binding::ProviderConcurrency
            | Binding::WorkspaceShare
            | Binding::ProviderShare
            | Binding::WorkspaceReservation
            | Binding::ProviderReservation => Reason::Concurrency,
            Binding::PrincipalRequests
            | Binding::WorkspaceRequests
            | Binding::ProviderRequests
            | Binding::ProviderQuotaRequests => Reason::RequestsPerMinute,
            Binding::PrincipalTokens
            | Binding::WorkspaceTokens
            | Binding::ProviderTokens
            | Binding::ProviderQuotaTokens => Reason::TokensPerSecond,
            Binding::ProviderPause => Reason::RetryAfter,
            Binding::ProviderBreaker => Reason::CircuitOpen,
        }
    }

    /// Whether it is the provider's announced quota rather than the profile.
    pub const fn is_provider_quota(self) -> bool {
        matches!(
            self,
            Binding::ProviderQuotaRequests | Binding::ProviderQuotaTokens
        )
    }

    /// Its position in [`Binding::ALL`].
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_each_binding_once_at_its_index() {
        for (i, binding) in Binding::ALL.iter().enumerate() {
            assert_eq!(binding.index(), i, "{binding:?}");
        }
        let wire = serde_json::to_string(&Binding::ProviderQuotaTokens).unwrap();
        assert_eq!(wire, "\"provider-quota-tokens\"");
    }
}
