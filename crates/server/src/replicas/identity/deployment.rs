//! A replica's [`IdentityStore`]: the [`Mirror`] of the shared feed. Writes go to Redis and are
//! applied here before the answer; a revocation first brings the mirror up to date (refused
//! while Redis does not answer).

use turnstile_admission::ProfileChangeRecord;
use turnstile_store::{AuditRecord, StoredKey};

use super::Mirror;
use crate::http::error::ApiError;
use crate::replicas::deployment::{BoxFuture, IdentityStore, NewRevision};

impl IdentityStore for Mirror {
    fn create_key<'a>(&'a self, key: &'a StoredKey) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(Mirror::create_key(self, key))
    }

    fn sync(&self) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(async move {
            Mirror::sync(self).await.map_err(|e| {
                ApiError::CoordinationUnavailable(format!("coordination-unavailable: {e}"))
            })
        })
    }

    fn revoke_key<'a>(
        &'a self,
        workspace: &'a str,
        hash: &'a str,
        record: AuditRecord,
    ) -> BoxFuture<'a, Result<bool, ApiError>> {
        Box::pin(async move { Mirror::revoke_key(self, workspace, hash, &record).await })
    }

    fn register(
        &self,
        revision: NewRevision,
    ) -> BoxFuture<'_, Result<Option<ProfileChangeRecord>, ApiError>> {
        Box::pin(async move {
            Mirror::register(
                self,
                &revision.workspace,
                &revision.version,
                revision.profile,
                revision.profile_json,
                revision.approval,
            )
            .await
        })
    }
}
