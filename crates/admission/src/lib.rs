//! turnstile-admission: the sans-IO admission core.
#![forbid(unsafe_code)]
