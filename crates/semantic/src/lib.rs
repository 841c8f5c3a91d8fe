//! The semantic roster scheduler of ADR 0119.
#![forbid(unsafe_code)]
