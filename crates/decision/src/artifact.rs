//! Artifacts and pins.
//!
//! Every artifact is `{apiVersion, kind, metadata: {id, version, description}, spec}`. Artifacts
//! refer to each other by a [`Pin`] `{id, version, digest}`, where `digest` is
//! `"sha256:" + hex(sha256(canonical JSON of the whole artifact))`. The digest is always taken
//! from the artifact **as given** (the JSON value the host supplied), never from a re-serialized
//! typed form, so unknown fields and number spellings are covered exactly as the author wrote
//! them. Canonical JSON is the admission crate's (`turnstile_admission::digest`): there is one
//! canonical JSON in turnstile.
//!
//! A binding target may pin a **subagent worker** (`subagent: {id, version, digest}`). A worker
//! is not an envelope artifact (`worker-fixture.json` is `{metadata: {id, version}, task}`): its
//! pin is [`worker_pin`], the metadata's identity and the digest of the worker's JSON as given.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use turnstile_admission::digest::canonical_digest;

/// The artifact format the fixtures use.
pub const API_VERSION: &str = "decision.aiwg.io/v1alpha1";

/// `metadata` of an artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub id: String,
    pub version: String,
    #[serde(default)]
    pub description: String,
}

/// A reference to an artifact by identity and content digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub id: String,
    pub version: String,
    pub digest: String,
}

/// The envelope of every artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact<S> {
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    pub spec: S,
}

/// A parsed artifact with the digest of its source JSON.
#[derive(Debug, Clone)]
pub struct Loaded<S> {
    pub artifact: Artifact<S>,
    pub digest: String,
}

impl<S> Loaded<S> {
    /// The pin that identifies this artifact.
    pub fn pin(&self) -> Pin {
        Pin {
            id: self.artifact.metadata.id.clone(),
            version: self.artifact.metadata.version.clone(),
            digest: self.digest.clone(),
        }
    }

    pub fn spec(&self) -> &S {
        &self.artifact.spec
    }
}

/// Why an artifact cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// `apiVersion` is not [`API_VERSION`].
    #[error("{kind}: unsupported apiVersion {found:?}")]
    ApiVersion { kind: &'static str, found: String },
    /// `kind` is not the expected one.
    #[error("expected a {expected}, found kind {found:?}")]
    Kind {
        expected: &'static str,
        found: String,
    },
    /// The JSON does not have the artifact's shape.
    #[error("{kind} is malformed: {message}")]
    Malformed { kind: &'static str, message: String },
    /// The artifact cannot be written as canonical JSON.
    #[error("{kind} cannot be digested")]
    Undigestable { kind: &'static str },
}

/// Why a pin does not select an artifact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// No artifact with the pinned id and version (`invalid-definition`).
    #[error("no artifact {id}@{version}")]
    Missing { id: String, version: String },
    /// Identity matches, content does not (`digest-mismatch`).
    #[error("{id}@{version}: digest {actual} does not match the pinned {pinned}")]
    DigestMismatch {
        id: String,
        version: String,
        pinned: String,
        actual: String,
    },
}

impl Pin {
    /// Whether this pin names the artifact (same id and version).
    pub fn names<S>(&self, loaded: &Loaded<S>) -> bool {
        self.id == loaded.artifact.metadata.id && self.version == loaded.artifact.metadata.version
    }

    /// Checks identity, then digest.
    pub fn check<S>(&self, loaded: &Loaded<S>) -> Result<(), PinError> {
        if !self.names(loaded) {
            return Err(PinError::Missing {
                id: self.id.clone(),
                version: self.version.clone(),
            });
        }
        if self.digest != loaded.digest {
            return Err(PinError::DigestMismatch {
                id: self.id.clone(),
                version: self.version.clone(),
                pinned: self.digest.clone(),
                actual: loaded.digest.clone(),
            });
        }
        Ok(())
    }
}

/// The digest of an artifact's JSON as given.
pub fn artifact_digest(value: &Value) -> Option<String> {
    canonical_digest(value).ok()
}

/// The kind name used in errors about a subagent worker.
pub const WORKER_KIND: &str = "subagent worker";

/// The pin of a subagent worker as deployed: `metadata.id`, `metadata.version` and the digest of
/// the worker's JSON as given.
pub fn worker_pin(value: &Value) -> Result<Pin, ArtifactError> {
    let metadata: Metadata = value
        .get("metadata")
        .cloned()
        .ok_or_else(|| ArtifactError::Malformed {
            kind: WORKER_KIND,
            message: "missing metadata".to_owned(),
        })
        .and_then(|m| {
            serde_json::from_value(m).map_err(|e| ArtifactError::Malformed {
                kind: WORKER_KIND,
                message: e.to_string(),
            })
        })?;
    let digest = artifact_digest(value).ok_or(ArtifactError::Undigestable { kind: WORKER_KIND })?;
    Ok(Pin {
        id: metadata.id,
        version: metadata.version,
        digest,
    })
}

/// Parses an artifact of `kind` and digests its source JSON.
pub fn load<S: DeserializeOwned>(
    value: &Value,
    kind: &'static str,
) -> Result<Loaded<S>, ArtifactError> {
    let found_kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    if found_kind != kind {
        return Err(ArtifactError::Kind {
            expected: kind,
            found: found_kind.to_owned(),
        });
    }
    let artifact: Artifact<S> =
        serde_json::from_value(value.clone()).map_err(|e| ArtifactError::Malformed {
            kind,
            message: e.to_string(),
        })?;
    if artifact.api_version != API_VERSION {
        return Err(ArtifactError::ApiVersion {
            kind,
            found: artifact.api_version,
        });
    }
    let digest = artifact_digest(value).ok_or(ArtifactError::Undigestable { kind })?;
    Ok(Loaded { artifact, digest })
}
