//! `turnstile admin-key reset`: offline recovery of a lost admin key.
//!
//! Invariants: refused while a service holds the data directory: the command takes the
//! directory's lock (`turnstile.lock`, the one `turnstile serve` holds for its whole life,
//! `turnstile_server::DataDirLock`), then SQLite's exclusive lock on the database, which fails at
//! once while any other connection has it open
//! (`SqliteServiceStore::open_dir_exclusive`); both are held until the command ends, so a
//! service cannot start half-way. Every stored admin key is replaced by one new key, and a
//! `turnstile-admin-key-reset/v1` record is appended to the audit log in the same transaction.
//! Principal keys, profiles and the rest of the audit log are untouched. The new key is printed
//! once, on stdout; only its hash is stored. Never creates a data directory or a database.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use turnstile_server::{generate_key, key_id, stored_key, DataDirLock, DataLockError};
use turnstile_shell::Clock;
use turnstile_store::{
    AuditKind, AuditRecord, KeyRole, ServiceStoreError, SqliteServiceStore, SERVICE_DB_FILE,
};

use turnstile_cli::HintExt;

/// The audit record's schema.
pub const RESET_SCHEMA: &str = "turnstile-admin-key-reset/v1";

#[derive(Debug, Subcommand)]
pub enum AdminKeyCommand {
    /// Replace every admin key of a stopped service's data directory by a new one, printed once.
    Reset(ResetArgs),
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The service's data directory (default: the config file's `data_dir`, else
    /// ./turnstile-data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// The service's TOML configuration file, to find its data directory.
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn run(command: AdminKeyCommand) -> anyhow::Result<()> {
    match command {
        AdminKeyCommand::Reset(args) => reset(args),
    }
}

fn reset(args: ResetArgs) -> anyhow::Result<()> {
    let data = match (&args.data, &args.config) {
        (Some(data), _) => data.clone(),
        (None, Some(config)) => {
            turnstile_server::Config::load(config)
                .with_context(|| format!("cannot read {}", config.display()))?
                .data_dir
        }
        (None, None) => turnstile_server::Config::default().data_dir,
    };
    // Only a directory that holds a database is locked (locking creates the lock file).
    let lock =
        if data.join(SERVICE_DB_FILE).is_file() {
            match DataDirLock::acquire(&data) {
                Ok(lock) => Some(lock),
                Err(error @ DataLockError::Held { .. }) => return Err(error).hint(
                    "stop the service using this data directory first (Ctrl-C or SIGTERM), then \
                     run this again",
                ),
                Err(error) => return Err(error.into()),
            }
        } else {
            None
        };
    let mut store =
        match SqliteServiceStore::open_dir_exclusive(&data) {
            Ok(store) => store,
            Err(error @ ServiceStoreError::InUse { .. }) => return Err(error).hint(
                "stop the service using this data directory first (Ctrl-C or SIGTERM), then run \
                 this again",
            ),
            Err(error @ ServiceStoreError::NoDatabase { .. }) => {
                return Err(error).hint(
                    "pass the service's data directory with --data DIR (or its --config FILE); a \
                 directory without a database needs no recovery: `turnstile serve` creates one",
                )
            }
            Err(error) => return Err(error.into()),
        };
    let now = Clock::system().now_ms();
    let key = generate_key(KeyRole::Admin).context("cannot generate a key")?;
    let stored = stored_key(&key, KeyRole::Admin, None, None, now);
    let key_id = key_id(&stored.hash);
    let record = AuditRecord {
        workspace_id: String::new(),
        kind: AuditKind::AdminKeyReset,
        record_json: serde_json::json!({
            "schema": RESET_SCHEMA,
            "keyId": key_id,
            "atEpochMs": now,
        })
        .to_string(),
        at_epoch_ms: now,
        // Offline, by whoever holds the data directory: no API key acted.
        actor_key_id: None,
        note: None,
        approved_by: None,
    };
    let replaced = store
        .replace_admin_keys(&stored, &record)
        .with_context(|| format!("cannot replace the admin key in {}", data.display()))?;
    drop(store);
    drop(lock);
    eprintln!(
        "admin key reset in {}: {replaced} old admin key{} no longer work{}; the new key ({key_id}) \
         is shown once and stored only as its hash (audited as {RESET_SCHEMA}):",
        data.display(),
        if replaced == 1 { "" } else { "s" },
        if replaced == 1 { "s" } else { "" },
    );
    println!("{key}");
    Ok(())
}
