//! A replica's start on the shared identity feed, before its registry, key ring and driver
//! exist (so everything here works on the SQLite store directly).
//!
//! | Redis | this data directory | what happens | banner |
//! |---|---|---|---|
//! | no feed | empty (first start) | first start as on one process (admin key, demo), then the feed is **seeded** from it | the admin key (and demo key) |
//! | no feed | a mirror or a single process's state | the feed is seeded from it (a single process joining, or Redis lost its state) | none |
//! | a feed | mirror of that feed (same epoch) | **catch up** from the stored cursor | none |
//! | a feed | anything else | **adopt**: the local keys, registrations and audit log are replaced by the feed's | "joined", no key |
//! | unreachable | mirror of some feed | start from the mirror (writes refused until Redis answers) | none |
//! | unreachable | never joined | refuse to start (it would make keys nobody else knows) | error |
//!
//! Two replicas starting at once on an empty Redis both seed; the function lets one win, the
//! other adopts the winner's feed and prints no key (its own first-start keys were never
//! shared and are dropped).
//!
//! Invariant: a key printed in a banner is live in the feed.

use std::time::Duration;

use turnstile_admission::Registry;
use turnstile_coord::identity::{
    key_tag, new_epoch, workspace_tag, IdentityStore, SeedItem, Seeded, WriteError,
};
use turnstile_coord::{CoordError, Topology};
use turnstile_store::{KeyRole, ServiceStore, ServiceStoreError};

use super::event::{
    apply_to_store, AuditDoc, AuditEventDoc, EventError, IdentityEvent, KeyDoc, RegistrationDoc,
};
use super::{Cursor, PAGE};
use crate::bootstrap::{self, BootstrapError, BootstrapKeys};

/// How this start met the feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joining {
    /// This replica created the feed from its state.
    Seeded {
        /// Events written to the feed.
        events: u64,
    },
    /// The mirror was replaced by the deployment's feed.
    Adopted {
        /// Events read from the feed.
        events: u64,
    },
    /// The mirror caught up with the feed it already followed.
    CaughtUp {
        /// New events read from the feed.
        events: u64,
    },
    /// Redis did not answer: serving from the mirror as it was.
    Offline,
}

/// The outcome of [`join`].
#[derive(Debug, Clone)]
pub struct Joined {
    pub how: Joining,
    pub cursor: Cursor,
    /// First-start keys, only when this replica seeded the feed with them.
    pub bootstrap: Option<BootstrapKeys>,
}

/// Why a replica cannot start on the feed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// Redis does not answer and this data directory never joined.
    #[error("Redis does not answer and this data directory has never joined the deployment's shared keys and profiles: start it once Redis is reachable ({0})")]
    NeverJoined(CoordError),
    /// A Redis call failed.
    #[error(transparent)]
    Redis(#[from] CoordError),
    /// The feed could not be seeded.
    #[error("the shared feed could not be seeded: {0}")]
    Seed(#[from] WriteError),
    /// An event of the feed cannot be read.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The service store failed.
    #[error(transparent)]
    Store(#[from] ServiceStoreError),
    /// The first start's set-up failed.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// The feed contradicts itself.
    #[error("the shared feed is inconsistent: {0}")]
    Feed(String),
    #[error(
        "the Redis at the coordination URL is a Redis Cluster node (cluster_enabled:1): start \
         with --redis-cluster (or `[coordination] redis_cluster = true`) to coordinate through \
         the cluster (docs/replicas.md)"
    )]
    /// The Redis is a Cluster node but `--redis-cluster` is not set.
    Cluster,
    #[error(
        "--redis-cluster (`[coordination] redis_cluster`) is set, but the Redis at the \
         coordination URL is not a Redis Cluster node (cluster_enabled:0): leave it out to \
         coordinate through one standalone Redis (docs/replicas.md)"
    )]
    /// `--redis-cluster` is set but the Redis is not a Cluster node.
    NotCluster,
}

/// The epoch of a feed seeded with `items` events: random, and naming the seed's length so a
/// replica that meets a feed seeded again by another replica knows where the seed ends.
pub fn epoch_for(items: usize) -> Result<String, CoordError> {
    Ok(format!("{}-{items}", new_epoch()?))
}

/// The number of events a feed with this epoch was seeded with (0 if it does not say).
pub fn seeded_length(epoch: &str) -> u64 {
    epoch
        .rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

/// The feed's seed from this store: keys, registrations (oldest first), then the audit log.
pub fn seed_items(store: &dyn ServiceStore) -> Result<Vec<SeedItem>, JoinError> {
    let mut items = Vec::new();
    for key in store.keys()? {
        let workspace = match key.role {
            KeyRole::Admin => None,
            KeyRole::Principal => key.workspace_id.as_deref(),
        };
        items.push(SeedItem::Key {
            tag: key_tag(workspace),
            event: IdentityEvent::KeyCreated(KeyDoc::from(&key)).to_json()?,
            hash: key.hash,
        });
    }
    for profile in store.profiles()? {
        items.push(SeedItem::Registration {
            workspace_tag: workspace_tag(&profile.workspace_id),
            event: IdentityEvent::ProfileRegistered(RegistrationDoc {
                workspace_id: profile.workspace_id,
                profile_version: profile.profile_version,
                profile_json: profile.profile_json,
                registered_at_ms: profile.registered_at_ms,
                actor_key_id: None,
                note: None,
                approved_by: None,
                // Its record is in the audit log below.
                change: None,
            })
            .to_json()?,
        });
    }
    for record in store.audit_all()? {
        items.push(SeedItem::Event(
            IdentityEvent::Audit(AuditEventDoc {
                record: AuditDoc::from(&record),
                origin: None,
            })
            .to_json()?,
        ));
    }
    Ok(items)
}

/// Reads the feed's head, trying for about `patience` while Redis does not answer.
async fn first_look(
    redis: &IdentityStore,
    after: u64,
    patience: Duration,
) -> Result<turnstile_coord::identity::FeedPage, CoordError> {
    let started = std::time::Instant::now();
    loop {
        match redis.since(after, PAGE).await {
            Ok(page) => return Ok(page),
            Err(error) if started.elapsed() >= patience => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Applies the feed after `from` to the store; answers the new cursor.
async fn catch_up(
    store: &mut dyn ServiceStore,
    redis: &IdentityStore,
    epoch: &str,
    from: u64,
) -> Result<Cursor, JoinError> {
    let mut seq = from;
    loop {
        let page = redis.since(seq, PAGE).await?;
        if page.epoch.as_deref() != Some(epoch) {
            return Err(JoinError::Feed(
                "its epoch changed while catching up".into(),
            ));
        }
        for event in &page.events {
            if event.seq != seq + 1 {
                return Err(JoinError::Feed(format!(
                    "event {} follows {seq}",
                    event.seq
                )));
            }
            apply_to_store(store, &IdentityEvent::parse(&event.event)?)?;
            seq = event.seq;
        }
        store.set_mirror_cursor(epoch, seq)?;
        if seq >= page.head || page.events.is_empty() {
            return Ok(Cursor {
                epoch: epoch.to_owned(),
                seq,
            });
        }
    }
}

/// Brings this data directory onto the deployment's feed (the table in the module docs).
pub async fn join(
    store: &mut dyn ServiceStore,
    redis: &IdentityStore,
    demo: bool,
    now: u64,
) -> Result<Joined, JoinError> {
    let mirrored = store.mirror_cursor()?;
    let looked = first_look(redis, 0, Duration::from_secs(2)).await;
    // A Redis that answered (the feed, or an error such as `MOVED` / `CLUSTERDOWN`) is asked
    // whether it is a cluster node: a cluster reached as one Redis (or one Redis reached as a
    // cluster) is refused with its reason, not joined (or left to fail on every call later).
    // One that did not answer is not asked.
    match redis.topology() {
        Topology::Standalone => {
            if !matches!(looked, Err(CoordError::Timeout(_)))
                && redis.cluster_enabled().await == Ok(true)
            {
                return Err(JoinError::Cluster);
            }
        }
        Topology::Cluster => {
            if looked.is_err() && redis.seed_cluster_enabled().await == Ok(false) {
                return Err(JoinError::NotCluster);
            }
        }
    }
    let page = match looked {
        Ok(page) => page,
        Err(error) => {
            return match mirrored {
                Some((epoch, seq)) => Ok(Joined {
                    how: Joining::Offline,
                    cursor: Cursor { epoch, seq },
                    bootstrap: None,
                }),
                None => Err(JoinError::NeverJoined(error)),
            };
        }
    };
    let Some(epoch) = page.epoch else {
        // No feed: seed it from this store (after a first start if it is empty).
        let bootstrap = bootstrap::first_start(store, &mut Registry::new(), demo, now)?;
        let items = seed_items(store)?;
        let events = u64::try_from(items.len()).unwrap_or(u64::MAX);
        match redis.seed(&epoch_for(items.len())?, &items).await? {
            Seeded::Created { epoch, head } => {
                store.set_mirror_cursor(&epoch, head)?;
                return Ok(Joined {
                    how: Joining::Seeded { events },
                    cursor: Cursor { epoch, seq: head },
                    bootstrap,
                });
            }
            // Another replica seeded first: adopt its feed; this start's keys were never
            // shared and are dropped with the rest of the local state.
            Seeded::Exists { epoch, .. } => return adopt(store, redis, &epoch).await,
        }
    };
    match mirrored {
        Some((mirrored_epoch, seq)) if mirrored_epoch == epoch && seq <= page.head => {
            let cursor = catch_up(store, redis, &epoch, seq).await?;
            Ok(Joined {
                how: Joining::CaughtUp {
                    events: cursor.seq.saturating_sub(seq),
                },
                cursor,
                bootstrap: None,
            })
        }
        _ => adopt(store, redis, &epoch).await,
    }
}

async fn adopt(
    store: &mut dyn ServiceStore,
    redis: &IdentityStore,
    epoch: &str,
) -> Result<Joined, JoinError> {
    store.clear_identity()?;
    let cursor = catch_up(store, redis, epoch, 0).await?;
    Ok(Joined {
        how: Joining::Adopted { events: cursor.seq },
        cursor,
        bootstrap: None,
    })
}
