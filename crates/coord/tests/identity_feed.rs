//! The shared identity feed (`turnstile_identity_v2`) against a real `redis-server`: seeding
//! once (a second seed adopts), gapless ordered events, atomic key creation and revocation
//! (a duplicate or a second revocation is refused), the registration compare-and-set (two
//! writers validated against the same count: exactly one wins), epoch fencing after Redis lost
//! its state, no tenant ID or secret in any key name, and the write deadline: every write
//! function refuses a write whose deadline (Redis server time) has passed and applies one
//! whose deadline has not; a write sent to a stopped Redis is answered "outcome unknown" and
//! never applies when Redis resumes.

use std::time::{Duration, Instant};

use redis::Value;
use turnstile_coord::identity::{
    key_tag, workspace_tag, IdentityStore, SeedItem, Seeded, WriteError, Written, KEYS,
};
use turnstile_coord::Topology;
use turnstile_testkit::RedisServer;

fn store(server: &RedisServer) -> IdentityStore {
    IdentityStore::new(&server.url(), Topology::Standalone, Duration::from_secs(2)).unwrap()
}

async fn seeded(store: &IdentityStore) -> String {
    let items = vec![
        SeedItem::Key {
            hash: "aa".repeat(32),
            tag: key_tag(None),
            event: "admin".into(),
        },
        SeedItem::Registration {
            workspace_tag: workspace_tag("acme"),
            event: "reg-1".into(),
        },
        SeedItem::Event("audit".into()),
    ];
    match store.seed("epoch-1", &items).await.unwrap() {
        Seeded::Created { epoch, head } => {
            assert_eq!(head, 3);
            epoch
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_is_seeded_once_and_read_in_order_without_gaps() {
    let server = RedisServer::start().unwrap();
    let (a, b) = (store(&server), store(&server));
    let empty = a.since(0, 10).await.unwrap();
    assert_eq!((empty.epoch, empty.head), (None, 0));
    let epoch = seeded(&a).await;
    // A second replica starting on the same Redis adopts: its seed is refused.
    assert_eq!(
        b.seed("epoch-2", &[SeedItem::Event("other".into())])
            .await
            .unwrap(),
        Seeded::Exists {
            epoch: epoch.clone(),
            head: 3
        }
    );
    for i in 0..7 {
        let written = b.append(&epoch, &format!("e{i}")).await.unwrap();
        assert_eq!(
            written,
            Written::Appended {
                seq: 4 + i,
                registration: None
            }
        );
    }
    // Paged reads from any cursor: numbered, in order, no gap.
    let mut cursor = 0;
    let mut seen = Vec::new();
    loop {
        let page = a.since(cursor, 4).await.unwrap();
        assert_eq!(page.epoch.as_deref(), Some(epoch.as_str()));
        assert_eq!(page.head, 10);
        if page.events.is_empty() {
            break;
        }
        for event in page.events {
            assert_eq!(event.seq, cursor + 1);
            cursor = event.seq;
            seen.push(event.event);
        }
    }
    assert_eq!(seen[..3], ["admin", "reg-1", "audit"]);
    assert_eq!(seen[9], "e6");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_created_and_revoked_once_and_only_in_their_workspace() {
    let server = RedisServer::start().unwrap();
    let (a, b) = (store(&server), store(&server));
    let epoch = seeded(&a).await;
    let hash = "bb".repeat(32);
    let tag = key_tag(Some("acme"));
    assert!(matches!(
        a.create_key(&epoch, &hash, &tag, "created").await.unwrap(),
        Written::Appended { seq: 4, .. }
    ));
    assert_eq!(
        b.create_key(&epoch, &hash, &tag, "again").await.unwrap(),
        Written::Duplicate
    );
    // Another workspace's revocation, and the admin key, are unknown to a principal revocation.
    assert_eq!(
        b.revoke_key(&epoch, &hash, &key_tag(Some("other")), "x")
            .await
            .unwrap(),
        Written::Unknown
    );
    assert_eq!(
        b.revoke_key(&epoch, &"aa".repeat(32), &tag, "x")
            .await
            .unwrap(),
        Written::Unknown
    );
    // Two replicas revoke at once: exactly one revocation is recorded.
    let (first, second) = tokio::join!(
        a.revoke_key(&epoch, &hash, &tag, "revoked-a"),
        b.revoke_key(&epoch, &hash, &tag, "revoked-b")
    );
    let outcomes = [first.unwrap(), second.unwrap()];
    assert_eq!(
        outcomes
            .iter()
            .filter(|w| matches!(w, Written::Appended { .. }))
            .count(),
        1,
        "{outcomes:?}"
    );
    assert!(outcomes.contains(&Written::Unknown));
    let page = a.since(4, 10).await.unwrap();
    assert_eq!(page.events.len(), 1);
    assert!(page.events[0].event.starts_with("revoked-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registrations_get_distinct_numbers_by_compare_and_set() {
    let server = RedisServer::start().unwrap();
    let (a, b) = (store(&server), store(&server));
    let epoch = seeded(&a).await;
    let acme = workspace_tag("acme");
    // Both validated against the one earlier registration: one wins, the other is stale.
    let (first, second) = tokio::join!(
        a.register(&epoch, &acme, 1, "reg-a"),
        b.register(&epoch, &acme, 1, "reg-b")
    );
    let outcomes = [first.unwrap(), second.unwrap()];
    let winners: Vec<_> = outcomes
        .iter()
        .filter_map(|w| match w {
            Written::Appended { registration, .. } => *registration,
            _ => None,
        })
        .collect();
    assert_eq!(winners, [2], "{outcomes:?}");
    assert!(outcomes.contains(&Written::Stale { registrations: 2 }));
    // The loser catches up and validates again against 2: number 3.
    assert!(matches!(
        b.register(&epoch, &acme, 2, "reg-b").await.unwrap(),
        Written::Appended {
            registration: Some(3),
            ..
        }
    ));
    // Another workspace counts on its own.
    assert!(matches!(
        a.register(&epoch, &workspace_tag("globex"), 0, "reg-g")
            .await
            .unwrap(),
        Written::Appended {
            registration: Some(1),
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_fenced_by_the_epoch_after_redis_lost_its_state() {
    let mut server = RedisServer::start().unwrap();
    let a = store(&server);
    let epoch = seeded(&a).await;
    assert_eq!(
        a.append("not-the-epoch", "x").await.unwrap(),
        Written::WrongEpoch {
            current: Some(epoch.clone())
        }
    );
    server.restart_empty().unwrap();
    // The library is loaded again on the first call; the feed is gone.
    let mut page = None;
    for _ in 0..50 {
        match a.since(0, 10).await {
            Ok(p) => {
                page = Some(p);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let page = page.expect("Redis answers again");
    assert_eq!((page.epoch, page.head), (None, 0));
    assert_eq!(
        a.create_key(&epoch, &"cc".repeat(32), &key_tag(None), "x")
            .await
            .unwrap(),
        Written::WrongEpoch { current: None }
    );
    // Seeding again (from a replica's mirror) makes a new epoch.
    assert!(matches!(
        a.seed("epoch-2", &[SeedItem::Event("x".into())])
            .await
            .unwrap(),
        Seeded::Created { head: 1, .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_name_holds_a_tenant_id_or_a_secret() {
    let server = RedisServer::start().unwrap();
    let a = store(&server);
    let epoch = seeded(&a).await;
    a.create_key(&epoch, &"dd".repeat(32), &key_tag(Some("acme-corp")), "{}")
        .await
        .unwrap();
    a.register(&epoch, &workspace_tag("acme-corp"), 0, "{}")
        .await
        .unwrap();
    let names = server.cli(&["KEYS", "*"]);
    assert!(!names.is_empty());
    for name in names.lines() {
        assert!(name.starts_with("ts:{ts-id}:"), "{name}");
        assert!(!name.contains("acme"), "{name}");
    }
    let index = server.cli(&["HGETALL", "ts:{ts-id}:keys"]);
    assert!(!index.contains("acme"), "{index}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_writers_racing_get_every_registration_number_once_and_a_gapless_feed() {
    let server = RedisServer::start().unwrap();
    let epoch = seeded(&store(&server)).await;
    let acme = workspace_tag("acme");
    let (writers, each) = (8u64, 10u64);
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (client, epoch, acme) = (store(&server), epoch.clone(), acme.clone());
            tokio::spawn(async move {
                let mut numbers = Vec::new();
                for i in 0..each {
                    // Each writer "catches up" by reading the count it lost against.
                    let mut expected = 1;
                    loop {
                        match client
                            .register(&epoch, &acme, expected, &format!("w{w}-{i}"))
                            .await
                            .unwrap()
                        {
                            Written::Appended {
                                registration: Some(n),
                                ..
                            } => {
                                numbers.push(n);
                                break;
                            }
                            Written::Stale { registrations } => expected = registrations,
                            other => panic!("{other:?}"),
                        }
                    }
                }
                numbers
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for task in tasks {
        numbers.extend(task.await.unwrap());
    }
    numbers.sort_unstable();
    let expected: Vec<u64> = (2..2 + writers * each).collect();
    assert_eq!(numbers, expected, "every number exactly once");
    let page = store(&server).since(3, 1_000).await.unwrap();
    assert_eq!(page.head, 3 + writers * each);
    let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (4..4 + writers * each).collect::<Vec<_>>());
}

/// One `FCALL` of an identity write function with an explicit deadline (server ms).
async fn fcall(
    connection: &mut redis::aio::MultiplexedConnection,
    function: &str,
    deadline: u64,
    args: &[&str],
) -> Vec<String> {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(function)
        .arg(KEYS.len())
        .arg(&KEYS[..])
        .arg(deadline)
        .arg(args);
    let value: Value = cmd.query_async(connection).await.unwrap();
    let Value::Array(items) = value else {
        panic!("{value:?}")
    };
    items
        .iter()
        .map(|item| match item {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::Int(n) => n.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

async fn server_now(connection: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(connection).await.unwrap();
    seconds * 1_000 + micros / 1_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_function_refuses_a_past_deadline_and_applies_a_future_one() {
    let server = RedisServer::start().unwrap();
    let a = store(&server);
    // The first read loads the library; no feed yet.
    assert_eq!(a.since(0, 10).await.unwrap().epoch, None);
    let client = redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let hash = "ee".repeat(32);
    let tag = key_tag(Some("acme"));
    let acme = workspace_tag("acme");
    let past = |now: u64| now - 1;
    let future = |now: u64| now + 60_000;

    // The seed: refused past its deadline (no feed is created), applied before it.
    let now = server_now(&mut connection).await;
    let answer = fcall(
        &mut connection,
        "ts_id_seed_v2",
        past(now),
        &["e1", "e", "", "", "x"],
    )
    .await;
    assert_eq!(answer[0], "late", "{answer:?}");
    assert!(answer[1].parse::<u64>().unwrap() >= now);
    assert_eq!(a.since(0, 10).await.unwrap().epoch, None, "nothing seeded");
    let answer = fcall(
        &mut connection,
        "ts_id_seed_v2",
        future(now),
        &["e1", "e", "", "", "x"],
    )
    .await;
    assert_eq!(answer, ["seeded", "e1", "1"]);

    // Each write: late (nothing written: no event, no index change), then applied.
    let writes: [(&str, Vec<&str>); 4] = [
        ("ts_id_key_v2", vec!["e1", &hash, &tag, "created"]),
        ("ts_id_register_v2", vec!["e1", &acme, "0", "registered"]),
        ("ts_id_append_v2", vec!["e1", "audit"]),
        ("ts_id_revoke_v2", vec!["e1", &hash, &tag, "revoked"]),
    ];
    let mut head = 1;
    for (function, args) in &writes {
        let now = server_now(&mut connection).await;
        let answer = fcall(&mut connection, function, past(now), args).await;
        assert_eq!(answer[0], "late", "{function}: {answer:?}");
        let page = a.since(0, 100).await.unwrap();
        assert_eq!(page.head, head, "{function} late: no event");
        let answer = fcall(&mut connection, function, future(now), args).await;
        assert_eq!(answer[0], "ok", "{function}: {answer:?}");
        head += 1;
        assert_eq!(answer[1], head.to_string(), "{function}");
    }
    let events: Vec<String> = a
        .since(0, 100)
        .await
        .unwrap()
        .events
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(events, ["x", "created", "registered", "audit", "revoked"]);
    // A deadline that does not parse writes nothing either.
    let answer = fcall(&mut connection, "ts_id_append_v2", 0, &["e1", "audit"]).await;
    assert_eq!(answer[0], "late");
    let mut cmd = redis::cmd("FCALL");
    cmd.arg("ts_id_append_v2")
        .arg(KEYS.len())
        .arg(&KEYS[..])
        .arg("soon")
        .arg("e1")
        .arg("x");
    let value: Value = cmd.query_async(&mut connection).await.unwrap();
    assert!(format!("{value:?}").contains("late"), "{value:?}");
    assert_eq!(a.since(0, 100).await.unwrap().head, head);
    // A write that finds the library missing loads it, reads Redis's clock again and is sent
    // once more.
    assert_eq!(server.cli(&["FUNCTION", "FLUSH"]), "OK");
    assert_eq!(
        a.append("e1", "after-flush").await,
        Ok(Written::Appended {
            seq: head + 1,
            registration: None
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_sent_to_a_stopped_redis_is_answered_unknown_and_never_applies_after_it_resumes() {
    let server = RedisServer::start().unwrap();
    let timeout = Duration::from_secs(1);
    let a = IdentityStore::new(&server.url(), Topology::Standalone, timeout).unwrap();
    let epoch = seeded(&a).await;
    // A fresh reading of Redis's clock (a feed read), so the writes are sent at once.
    a.since(0, 10).await.unwrap();
    server.signal("STOP");
    let hash = "ff".repeat(32);
    let tag = key_tag(Some("acme"));
    let acme = workspace_tag("acme");
    let sent = Instant::now();
    let (created, registered) = tokio::join!(
        a.create_key(&epoch, &hash, &tag, "created"),
        a.register(&epoch, &acme, 1, "registered"),
    );
    let answered = sent.elapsed();
    for outcome in [&created, &registered] {
        assert!(
            matches!(outcome, Err(WriteError::OutcomeUnknown(_))),
            "{outcome:?}"
        );
    }
    assert!(answered >= timeout, "answered after {answered:?}");
    // Stopped for longer than the deadlines: when Redis resumes, both writes are late.
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.signal("CONT");
    let page = answered_again(&a).await;
    assert_eq!(page.head, 3, "nothing applied: {:?}", page.events);
    assert_eq!(server.cli(&["HEXISTS", "ts:{ts-id}:keys", &hash]), "0");
    // Redis answers again: the same writes go through.
    assert!(matches!(
        a.create_key(&epoch, &hash, &tag, "created").await,
        Ok(Written::Appended { seq: 4, .. })
    ));
    // A write with no recent reading of Redis's clock asks for one first: with Redis stopped
    // nothing is sent, and the answer says nothing was written.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    server.signal("STOP");
    let refused = a.append(&epoch, "audit").await;
    server.signal("CONT");
    assert!(
        matches!(refused, Err(WriteError::NotWritten(_))),
        "{refused:?}"
    );
    assert_eq!(answered_again(&a).await.head, 4);
}

/// The feed, once the client's connection answers again (it may reconnect after timeouts).
async fn answered_again(store: &IdentityStore) -> turnstile_coord::identity::FeedPage {
    let started = Instant::now();
    loop {
        match store.since(0, 100).await {
            Ok(page) => return page,
            Err(error) => assert!(started.elapsed() < Duration::from_secs(5), "{error}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
