//! REFERENCE §6's registry bounds: "at most 1024 idle scopes, 4096 tracked revisions and 4096
//! tracked principals are kept". They bound what the registry *remembers*, not what it
//! accepts: at the bound every revision (and every principal revision) is still immutable; one
//! more and the oldest is forgotten, so it can be registered afresh. (The 1024 idle scopes:
//! `principal_eviction.rs`.)

use std::collections::BTreeMap;

use turnstile_admission::{
    Limits, Profile, ProfileChangeKind, Registry, RegistryError, TRACKED_PRINCIPALS_LIMIT,
    TRACKED_REVISIONS_LIMIT,
};

const WORKSPACE: &str = "workspace";

fn profile(workspace_concurrency: u32, principals: &[(&str, u32)]) -> Profile {
    Profile {
        workspace: Limits::with_concurrency(workspace_concurrency),
        providers: [("jev".to_owned(), Limits::with_concurrency(4))]
            .into_iter()
            .collect(),
        principals: principals
            .iter()
            .map(|&(id, concurrency)| (id.to_owned(), Limits::with_concurrency(concurrency)))
            .collect(),
    }
}

fn kind(
    registry: &mut Registry,
    version: &str,
    profile: Profile,
) -> Result<Option<ProfileChangeKind>, RegistryError> {
    registry
        .register(WORKSPACE, version, profile, 0)
        .map(|record| record.map(|r| r.kind))
}

#[test]
fn the_registry_keeps_4096_revisions_then_forgets_the_oldest() {
    assert_eq!(TRACKED_REVISIONS_LIMIT, 4096);
    let mut registry = Registry::new();
    // Revision i has workspace concurrency i + 1: every revision has its own digest.
    for i in 0..TRACKED_REVISIONS_LIMIT as u32 {
        let expected = if i == 0 {
            ProfileChangeKind::Initial
        } else {
            ProfileChangeKind::Change
        };
        let got = kind(&mut registry, &format!("v{i}"), profile(i + 1, &[("a", 1)]));
        assert_eq!(got, Ok(Some(expected)), "v{i}");
    }
    // At the bound: the oldest is kept, still immutable, still a rollback target.
    assert!(registry.revision_digest(WORKSPACE, "v0").is_some());
    assert_eq!(
        kind(&mut registry, "v0", profile(99_999, &[("a", 1)])),
        Err(RegistryError::Conflict {
            profile_version: "v0".into()
        })
    );
    let digest_v0 = registry
        .revision_digest(WORKSPACE, "v0")
        .unwrap()
        .to_owned();
    assert_eq!(
        kind(&mut registry, "v0", profile(1, &[("a", 1)])),
        Ok(Some(ProfileChangeKind::Rollback))
    );
    assert_eq!(
        registry.profile_history(WORKSPACE).last().unwrap().digest,
        digest_v0
    );

    // One more revision: the oldest, v0 (registered first; a rollback does not make it
    // younger, and the current revision is now the new one), is forgotten, nothing else.
    let extra = TRACKED_REVISIONS_LIMIT as u32;
    assert_eq!(
        kind(
            &mut registry,
            &format!("v{extra}"),
            profile(extra + 1, &[("a", 1)])
        ),
        Ok(Some(ProfileChangeKind::Change))
    );
    assert!(
        registry.revision_digest(WORKSPACE, "v0").is_none(),
        "the oldest"
    );
    assert!(registry.revision_digest(WORKSPACE, "v1").is_some());
    // A forgotten revision is a new one: other limits are accepted, as a change.
    assert_eq!(
        kind(&mut registry, "v0", profile(77_777, &[("a", 1)])),
        Ok(Some(ProfileChangeKind::Change))
    );
    // The next oldest (v1) went with it; v2 is still immutable.
    assert!(registry.revision_digest(WORKSPACE, "v1").is_none());
    assert_eq!(
        kind(&mut registry, "v2", profile(77_777, &[("a", 1)])),
        Err(RegistryError::Conflict {
            profile_version: "v2".into()
        })
    );
}

#[test]
fn the_registry_keeps_4096_principal_revisions_then_forgets_the_oldest() {
    assert_eq!(TRACKED_PRINCIPALS_LIMIT, 4096);
    let ids: Vec<String> = (0..TRACKED_PRINCIPALS_LIMIT)
        .map(|i| format!("p{i}"))
        .collect();
    let named = |concurrency_of_p0: u32| -> Vec<(&str, u32)> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), if i == 0 { concurrency_of_p0 } else { 1 }))
            .collect()
    };
    let mut registry = Registry::new();
    // One revision naming 4096 principals: every (principal, v1) is tracked.
    assert_eq!(
        kind(&mut registry, "v1", profile(8, &named(1))),
        Ok(Some(ProfileChangeKind::Initial))
    );
    assert_eq!(
        kind(&mut registry, "v1", profile(8, &named(2))),
        Err(RegistryError::PrincipalConflict {
            profile_version: "v1".into()
        }),
        "at the bound the oldest principal revision is still immutable"
    );
    assert_eq!(
        kind(&mut registry, "v1", profile(8, &named(1))),
        Ok(None),
        "the same limits again: no change"
    );

    // One more principal revision: (p0, v1), the oldest, is forgotten, nothing else.
    assert_eq!(
        kind(&mut registry, "v2", profile(8, &[("late", 1)])),
        Ok(Some(ProfileChangeKind::Change))
    );
    let mut p0_changed: BTreeMap<String, Limits> = BTreeMap::new();
    p0_changed.insert("p0".into(), Limits::with_concurrency(2));
    let only_p0 = Profile {
        principals: p0_changed,
        ..profile(8, &[])
    };
    assert_eq!(
        kind(&mut registry, "v1", only_p0),
        Ok(Some(ProfileChangeKind::Rollback)),
        "p0 under v1 is no longer tracked"
    );
    assert_eq!(
        kind(&mut registry, "v1", profile(8, &[("p2", 2)])),
        Err(RegistryError::PrincipalConflict {
            profile_version: "v1".into()
        }),
        "(p0, v1) tracked again pushed out (p1, v1); p2 under v1 is still immutable"
    );
}
