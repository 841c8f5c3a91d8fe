//! The service store's held leases and budget spend (issue 14): SQLite and memory follow the
//! same rules, batches are all or nothing, and the state survives reopening the file.

use turnstile_store::service::{
    LeaseChange, LeaseDurability, MemoryServiceStore, ServiceStore, SqliteServiceStore,
    StoredLease, StoredSpend,
};

fn lease(token: &str, budget: &str, tokens: u64) -> StoredLease {
    StoredLease {
        token: token.into(),
        workspace_id: "w".into(),
        principal_id: "p".into(),
        provider_id: "jev".into(),
        budget_id: Some(budget.into()),
        attempts: 1,
        tokens: Some(tokens),
        cost_usd: Some(0.5),
        admitted_at_ms: 10,
        expires_at_ms: Some(30_010),
    }
}

fn released(token: &str, tokens: Option<u64>) -> LeaseChange {
    LeaseChange::Released {
        token: token.into(),
        actual_tokens: tokens,
        actual_cost_usd: None,
    }
}

fn spend(store: &dyn ServiceStore, budget: &str) -> Option<StoredSpend> {
    store
        .budget_spend()
        .unwrap()
        .into_iter()
        .find(|s| s.budget_id == budget)
}

fn rules(store: &mut dyn ServiceStore) {
    store
        .apply_lease_changes(&[
            LeaseChange::Granted(lease("a", "b1", 100)),
            LeaseChange::Granted(lease("b", "b1", 50)),
            LeaseChange::Granted(lease("c", "b2", 7)),
        ])
        .unwrap();
    let tokens: Vec<String> = store
        .held_leases()
        .unwrap()
        .into_iter()
        .map(|l| l.token)
        .collect();
    assert_eq!(tokens, ["a", "b", "c"], "grant order");
    assert_eq!(store.held_leases().unwrap()[0], lease("a", "b1", 100));
    let b1 = spend(store, "b1").unwrap();
    assert_eq!((b1.attempts, b1.tokens), (2, 150));
    assert!((b1.cost_usd - 1.0).abs() < 1e-9);

    // A release with actual usage corrects the spend line: 150 − 100 + 30.
    store
        .apply_lease_changes(&[released("a", Some(30)), released("unknown", Some(1))])
        .unwrap();
    let b1 = spend(store, "b1").unwrap();
    assert_eq!(
        (b1.attempts, b1.tokens),
        (2, 80),
        "attempts are never corrected"
    );
    assert_eq!(store.held_leases().unwrap().len(), 2);

    // Releasing the budget forgets its spend and detaches its held lease.
    store
        .apply_lease_changes(&[LeaseChange::BudgetReleased {
            workspace_id: "w".into(),
            budget_id: "b1".into(),
        }])
        .unwrap();
    assert!(spend(store, "b1").is_none());
    let held = store.held_leases().unwrap();
    assert_eq!(held[0].token, "b");
    assert_eq!(held[0].budget_id, None);
    // A reopened b1 is never corrected by the older lease.
    store
        .apply_lease_changes(&[
            LeaseChange::Granted(lease("d", "b1", 5)),
            released("b", Some(0)),
        ])
        .unwrap();
    assert_eq!(spend(store, "b1").unwrap().tokens, 5);
    // A release without usage keeps the estimate charged.
    store.apply_lease_changes(&[released("c", None)]).unwrap();
    assert_eq!(spend(store, "b2").unwrap().tokens, 7);
    let tokens: Vec<String> = store
        .held_leases()
        .unwrap()
        .into_iter()
        .map(|l| l.token)
        .collect();
    assert_eq!(tokens, ["d"]);
}

#[test]
fn sqlite_and_memory_follow_the_same_rules() {
    rules(&mut SqliteServiceStore::open_in_memory().unwrap());
    rules(&mut MemoryServiceStore::new());
}

#[test]
fn a_failed_batch_changes_nothing() {
    let mut store = SqliteServiceStore::open_in_memory().unwrap();
    store
        .apply_lease_changes(&[LeaseChange::Granted(lease("a", "b", 1))])
        .unwrap();
    // The second grant reuses a token: the whole batch is refused.
    let result = store.apply_lease_changes(&[
        LeaseChange::Granted(lease("x", "b", 1)),
        LeaseChange::Granted(lease("a", "b", 1)),
    ]);
    assert!(result.is_err());
    assert_eq!(store.held_leases().unwrap().len(), 1);
    assert_eq!(spend(&store, "b").unwrap().tokens, 1);
}

#[test]
fn leases_and_spend_survive_reopening_at_either_durability() {
    for durability in [LeaseDurability::Process, LeaseDurability::Machine] {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = SqliteServiceStore::open_dir(dir.path()).unwrap();
            store.set_lease_durability(durability).unwrap();
            store
                .apply_lease_changes(&[
                    LeaseChange::Granted(lease("a", "b", 3)),
                    LeaseChange::Granted(lease("b", "b", 4)),
                    released("a", None),
                ])
                .unwrap();
        }
        let store = SqliteServiceStore::open_dir(dir.path()).unwrap();
        assert_eq!(store.held_leases().unwrap(), vec![lease("b", "b", 4)]);
        assert_eq!(
            spend(&store, "b").unwrap().tokens,
            7,
            "{}",
            durability.as_str()
        );
    }
}
