//! [`Client::check_lanes`]: before a run admits anything, whether the key can admit calls on
//! the provider lanes it will name.
//!
//! Decides, in this order: the service answers the key (else [`LaneCheckError::Service`]); the
//! key's workspace has a profile ([`LaneCheckError::NoProfile`]); the key is a principal the
//! profile names, i.e. it may hold leases ([`LaneCheckError::NotAPrincipal`]: an admin key, or
//! a principal the profile does not name); every lane asked for is a provider lane of the
//! profile ([`LaneCheckError::UnknownLane`], naming the first missing lane and listing the
//! profile's lanes).
//!
//! Invariant: nothing changes on the service: the principal check is a heartbeat of a lease ID
//! no service grants (404 `unknown-lease` for a key that may hold leases, 403 otherwise).

use crate::client::Client;
use crate::error::ClientError;

/// A lease ID no service grants (not a lease token): its heartbeat asks only whether the key
/// may hold leases.
const NO_LEASE: &str = "no-lease";

/// Why the key cannot admit calls on the lanes asked for.
#[derive(Debug, thiserror::Error)]
pub enum LaneCheckError {
    /// The service could not be asked (unreachable, an unknown key, an unexpected answer).
    #[error("the service could not be asked about the key's workspace: {0}")]
    Service(#[from] ClientError),
    /// The key's workspace has no profile registered.
    #[error("the service has no admission profile for the key's workspace: register one first")]
    NoProfile,
    /// The key may not hold leases in its workspace (an admin key, or a principal the profile
    /// does not name): the service's reason.
    #[error("the key cannot admit calls in its workspace: {0}")]
    NotAPrincipal(String),
    /// A lane asked for is not a provider lane of the workspace's profile.
    #[error("{lane:?} is not a provider lane of the key's workspace profile; its lanes: {} (revision {revision})", lanes.join(", "))]
    UnknownLane {
        /// The lane asked for.
        lane: String,
        /// The profile's provider lanes.
        lanes: Vec<String>,
        /// The profile's revision.
        revision: String,
    },
}

impl Client {
    /// Checks that this key can admit calls on every lane of `lanes` (see the module); answers
    /// the profile's revision.
    pub async fn check_lanes(&self, lanes: &[&str]) -> Result<String, LaneCheckError> {
        let workspace = self.workspace().await?;
        let Some(revision) = workspace.profile_version else {
            return Err(LaneCheckError::NoProfile);
        };
        let snapshot = match self.snapshot(&workspace.workspace_id).await {
            Err(error) if error.not_found_code() == Some("no-profile") => {
                return Err(LaneCheckError::NoProfile)
            }
            other => other?,
        };
        match self.heartbeat(NO_LEASE).await {
            Err(ClientError::Status {
                status: 403,
                message,
                ..
            }) => return Err(LaneCheckError::NotAPrincipal(message)),
            Err(error) if error.not_found_code().is_some() => {}
            Err(error) => return Err(error.into()),
            Ok(_) => {}
        }
        let known = &snapshot.core.providers;
        match lanes.iter().find(|lane| !known.contains_key(**lane)) {
            None => Ok(revision),
            Some(lane) => Err(LaneCheckError::UnknownLane {
                lane: (*lane).to_owned(),
                lanes: known.keys().cloned().collect(),
                revision,
            }),
        }
    }
}
