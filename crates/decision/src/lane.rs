//! The scheduler lane of one alias ([`crate::scheduler`] serves lanes round-robin).
//!
//! A lane is named by the alias's first target's adapter and, when admission is on, by the
//! workspace and principal the run is admitted as. Invariants: the name is built here and only
//! here; its key (fields joined by U+001F, the ASCII unit separator) never leaves the
//! scheduler, so no ID reaches evidence, spans, metrics or logs through it.

use crate::plan::AliasPlan;
use crate::request::SchedulerRun;

/// Separates the fields of a lane key.
const UNIT_SEPARATOR: char = '\u{1f}';

/// The lane an alias runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneName<'a> {
    /// The first target's adapter id (`""` for an alias without targets).
    adapter: &'a str,
    /// `(workspace, principal)` when the scheduler admits the run.
    admitted_as: Option<(&'a str, &'a str)>,
}

impl<'a> LaneName<'a> {
    /// The lane of `alias` in a run admitted by `scheduler` (if any).
    pub(crate) fn of(alias: &'a AliasPlan, scheduler: Option<&'a SchedulerRun>) -> Self {
        LaneName {
            adapter: alias
                .binding
                .targets
                .first()
                .map_or("", |target| target.adapter.as_str()),
            admitted_as: scheduler
                .map(|run| (&*run.policy.workspace.id, &*run.policy.principal.id)),
        }
    }

    /// The scheduler's key: the adapter alone, or adapter, workspace and principal.
    pub(crate) fn key(self) -> String {
        match self.admitted_as {
            None => self.adapter.to_owned(),
            Some((workspace, principal)) => format!(
                "{}{UNIT_SEPARATOR}{workspace}{UNIT_SEPARATOR}{principal}",
                self.adapter
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_adapter_or_the_three_fields_unit_separated() {
        let alone = LaneName {
            adapter: "openai",
            admitted_as: None,
        };
        assert_eq!(alone.key(), "openai");
        let admitted = LaneName {
            adapter: "openai",
            admitted_as: Some(("ws", "pr")),
        };
        assert_eq!(admitted.key(), "openai\u{1f}ws\u{1f}pr");
        assert_eq!(admitted.key().as_bytes(), b"openai\x1fws\x1fpr");
    }
}
