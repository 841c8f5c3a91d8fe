//! Errors of the roster stores.

/// A failure of a roster store.
#[derive(Debug, thiserror::Error)]
pub enum RosterStoreError {
    /// The SQLite database could not be opened, migrated, read or written.
    #[error("roster database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored JSON document could not be encoded or decoded.
    #[error("roster document could not be encoded or decoded: {0}")]
    Json(#[from] serde_json::Error),
    /// A stored value does not belong to its closed vocabulary (for example a band of 3).
    #[error("roster database holds an invalid {field}: {value}")]
    InvalidValue {
        /// The column or field that holds the value.
        field: &'static str,
        /// The offending value.
        value: String,
    },
    /// `finish_call` named a call receipt that does not exist (it was pruned or never begun).
    #[error("no call receipt with id {0}")]
    UnknownCall(i64),
    /// The database was written by a newer schema than this build understands.
    #[error("roster database schema version {found} is newer than supported version {supported}")]
    SchemaTooNew {
        /// Version found in the file.
        found: i64,
        /// Highest version this build understands.
        supported: i64,
    },
    /// Creating the data directory failed.
    #[error("could not create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
}
