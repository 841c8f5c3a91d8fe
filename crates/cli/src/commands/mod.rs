//! One module per top-level subcommand.

pub mod evaluate;
pub mod profile;
pub mod qualify;
pub mod roster;
