//! A workspace's profile revisions ([`ProfileRevisions`]): which `profileVersion` is current,
//! the limits and digest of every revision kept, and the audit trail of changes of current
//! revision ([`ProfileChangeRecord`], `decision-admission-profile-change/v1`).
//!
//! # Invariants
//!
//! - A `profileVersion` is immutable: [`ProfileRevisions::check`] refuses a revision already
//!   kept with another digest, or a principal already kept under it with other limits, before
//!   anything changes.
//! - [`ProfileRevisions::accept`] emits exactly one record per change of current revision
//!   (`initial`, `change` or `rollback`) and none when the current revision is registered
//!   again. Records carry digests, never limit values.
//! - Bounded: [`PROFILE_HISTORY_LIMIT`] records, [`TRACKED_REVISIONS_LIMIT`] revisions (the
//!   current one is never forgotten) and [`TRACKED_PRINCIPALS_LIMIT`] principal revisions; the
//!   oldest goes first.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use foldhash::HashMap;
use serde::{Deserialize, Serialize};

use crate::digest::canonical_digest;
use crate::limits::Limits;
use crate::profile::Profile;
use crate::time::Millis;

use super::RegistryError;

/// The schema of a [`ProfileChangeRecord`].
pub const PROFILE_CHANGE_SCHEMA: &str = "decision-admission-profile-change/v1";
/// Profile-change records kept per workspace ([`crate::Registry::profile_history`]).
pub const PROFILE_HISTORY_LIMIT: usize = 64;
/// Revisions (limits and digest) kept per workspace.
pub const TRACKED_REVISIONS_LIMIT: usize = 4096;
/// Principal revisions (principal, `profileVersion`) whose digest is kept per workspace.
pub const TRACKED_PRINCIPALS_LIMIT: usize = 4096;

/// What kind of change of current revision a record reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProfileChangeKind {
    /// The workspace's first registration.
    Initial,
    /// A revision not registered before became current.
    Change,
    /// A revision registered before became current again.
    Rollback,
}

/// `decision-admission-profile-change/v1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileChangeRecord {
    /// Always [`PROFILE_CHANGE_SCHEMA`].
    pub schema: String,
    /// The workspace whose current revision changed.
    pub workspace_id: String,
    /// Initial, change or rollback.
    pub kind: ProfileChangeKind,
    /// The revision current before (none for `initial`).
    pub previous_profile_version: Option<String>,
    /// The revision current now.
    pub profile_version: String,
    /// The digest of the current revision's `{providers, workspace}` limits.
    pub digest: String,
    /// When the change was registered.
    pub at_epoch_ms: Millis,
}

/// The digests of one registration, computed before anything changes.
pub(super) struct Digests {
    /// The `{providers, workspace}` digest of the profile.
    profile: String,
    /// Each principal the registration names, with the digest of its limits.
    principals: Vec<(String, String)>,
}

impl Digests {
    /// Digests `profile`; a profile that cannot be digested is [`RegistryError::Undigestable`].
    pub(super) fn of(profile: &Profile) -> Result<Self, RegistryError> {
        let digest = profile.digest().map_err(|_| RegistryError::Undigestable)?;
        let mut principals = Vec::with_capacity(profile.principals.len());
        for (id, limits) in &profile.principals {
            let principal_digest =
                canonical_digest(limits).map_err(|_| RegistryError::Undigestable)?;
            principals.push((id.clone(), principal_digest));
        }
        Ok(Digests {
            profile: digest,
            principals,
        })
    }
}

struct Revision {
    digest: String,
    workspace: Limits,
    providers: BTreeMap<String, Limits>,
}

/// One workspace's revisions, principals and profile-change history.
#[derive(Default)]
pub(super) struct ProfileRevisions {
    current: String,
    revisions: HashMap<String, Revision>,
    revision_order: VecDeque<String>,
    principal_revisions: HashMap<(String, String), String>,
    principal_order: VecDeque<(String, String)>,
    principals: BTreeMap<String, Limits>,
    history: VecDeque<ProfileChangeRecord>,
    /// Revisions kept (a rollout's candidate) that were never current: becoming current is a
    /// `change`, not a `rollback`.
    never_current: BTreeSet<String>,
}

impl ProfileRevisions {
    /// Refuses a registration that would change a revision already kept.
    pub(super) fn check(
        &self,
        profile_version: &str,
        digests: &Digests,
    ) -> Result<(), RegistryError> {
        if let Some(revision) = self.revisions.get(profile_version) {
            if revision.digest != digests.profile {
                return Err(RegistryError::Conflict {
                    profile_version: profile_version.to_owned(),
                });
            }
        }
        for (id, principal_digest) in &digests.principals {
            let key = (id.clone(), profile_version.to_owned());
            if self
                .principal_revisions
                .get(&key)
                .is_some_and(|known| known != principal_digest)
            {
                return Err(RegistryError::PrincipalConflict {
                    profile_version: profile_version.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Every principal ever registered, with the limits of the newest registration naming it.
    pub(super) fn principals(&self) -> &BTreeMap<String, Limits> {
        &self.principals
    }

    /// Makes `profile_version` current (its limits from `profile`, the merged `principals`)
    /// and returns the record of the change, if the current revision changed.
    pub(super) fn accept(
        &mut self,
        workspace_id: &str,
        profile_version: &str,
        profile: Profile,
        principals: BTreeMap<String, Limits>,
        digests: Digests,
        now: Millis,
    ) -> Option<ProfileChangeRecord> {
        let (kind, previous) = if self.revisions.is_empty() {
            (Some(ProfileChangeKind::Initial), None)
        } else if self.current == profile_version {
            (None, None)
        } else if self.revisions.contains_key(profile_version)
            && !self.never_current.contains(profile_version)
        {
            (
                Some(ProfileChangeKind::Rollback),
                Some(self.current.clone()),
            )
        } else {
            (Some(ProfileChangeKind::Change), Some(self.current.clone()))
        };
        self.current = profile_version.to_owned();
        self.never_current.remove(profile_version);
        self.principals = principals;
        self.keep(profile_version, &profile, &digests);
        for (id, principal_digest) in digests.principals {
            let key = (id, profile_version.to_owned());
            if self
                .principal_revisions
                .insert(key.clone(), principal_digest)
                .is_none()
            {
                self.principal_order.push_back(key);
            }
            while self.principal_order.len() > TRACKED_PRINCIPALS_LIMIT {
                let Some(oldest) = self.principal_order.pop_front() else {
                    break;
                };
                self.principal_revisions.remove(&oldest);
            }
        }
        let record = kind.map(|kind| ProfileChangeRecord {
            schema: PROFILE_CHANGE_SCHEMA.to_owned(),
            workspace_id: workspace_id.to_owned(),
            kind,
            previous_profile_version: previous,
            profile_version: profile_version.to_owned(),
            digest: digests.profile,
            at_epoch_ms: now,
        });
        if let Some(record) = &record {
            if self.history.len() == PROFILE_HISTORY_LIMIT {
                self.history.pop_front();
            }
            self.history.push_back(record.clone());
        }
        record
    }

    /// Keeps a revision's limits and digest (once: a kept revision is immutable).
    fn keep(&mut self, profile_version: &str, profile: &Profile, digests: &Digests) {
        if self.revisions.contains_key(profile_version) {
            return;
        }
        self.revisions.insert(
            profile_version.to_owned(),
            Revision {
                digest: digests.profile.clone(),
                workspace: profile.workspace.clone(),
                providers: profile.providers.clone(),
            },
        );
        self.revision_order.push_back(profile_version.to_owned());
        while self.revision_order.len() > TRACKED_REVISIONS_LIMIT {
            let Some(oldest) = self.revision_order.pop_front() else {
                break;
            };
            if oldest == self.current {
                self.revision_order.push_back(oldest);
            } else {
                self.revisions.remove(&oldest);
                self.never_current.remove(&oldest);
            }
        }
    }

    /// Keeps a rollout's candidate revision without making it current (checked first with
    /// [`ProfileRevisions::check`]); no record is emitted.
    pub(super) fn stage(&mut self, profile_version: &str, profile: &Profile, digests: &Digests) {
        if !self.revisions.contains_key(profile_version) {
            self.never_current.insert(profile_version.to_owned());
        }
        self.keep(profile_version, profile, digests);
    }

    /// The `{providers, workspace}` digest of a registration's profile.
    pub(super) fn profile_digest(digests: &Digests) -> &str {
        &digests.profile
    }

    /// The current revision.
    pub(super) fn current(&self) -> &str {
        &self.current
    }

    /// The digest of a kept revision.
    pub(super) fn digest(&self, profile_version: &str) -> Option<&str> {
        self.revisions
            .get(profile_version)
            .map(|r| r.digest.as_str())
    }

    /// The workspace and provider limits of a kept revision.
    pub(super) fn limits(
        &self,
        profile_version: &str,
    ) -> Option<(&Limits, &BTreeMap<String, Limits>)> {
        self.revisions
            .get(profile_version)
            .map(|r| (&r.workspace, &r.providers))
    }

    /// The kept profile-change records, oldest first.
    pub(super) fn history(&self) -> Vec<ProfileChangeRecord> {
        self.history.iter().cloned().collect()
    }
}
