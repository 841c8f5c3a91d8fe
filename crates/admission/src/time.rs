//! Time in the admission core.
//!
//! The core never reads a clock. Every entry point takes `now` as integer milliseconds
//! ([`Millis`]); the host decides whether that is epoch time, tokio time or virtual time.
//! A controller never lets time run backwards: a `now` older than the newest one it has
//! seen is treated as that newest instant.

/// Integer milliseconds: an instant (epoch or virtual) or a duration.
pub type Millis = u64;
