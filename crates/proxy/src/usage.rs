//! The usage a provider reported: [`ProviderUsage`] and its readers live in
//! `turnstile-admission` (one reader for the proxy, the evaluator and the roster); this module
//! only names them for the proxy's call sites.

pub use turnstile_admission::ProviderUsage;

/// The former name of [`ProviderUsage`], kept while `handler.rs` still names it.
pub type Usage = ProviderUsage;
