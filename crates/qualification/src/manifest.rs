//! Pinned load manifests.
//!
//! A manifest is only valid when its bytes hash to the digest pinned for its version: v1 and v2
//! in the first seed, later versions in [`PINNED_DIGESTS`]. Changing a bound after observing
//! results means a new manifest version, never an edit. The manifests ship in the binary
//! (byte for byte, via `include_bytes!`), so `turnstile qualify` needs no file.
//!
//! A principal entry has two kinds of fields, kept apart: the **load generator's** (`weight`:
//! its share of the arrivals; `callTokens`, `actualTokens`, `deadlineMs`: the size, the actual
//! usage and the deadline of its calls) and the **admission profile's** (`limits`, where
//! `limits.weight` is the scheduling weight and `limits.priority` the band). Absent
//! load-generator fields keep REFERENCE §7's rules, so v1 and v2 run exactly as before.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use turnstile_admission::digest::sha256_digest;
use turnstile_admission::{Limits, Profile};

/// The embedded manifests, byte for byte.
pub const MANIFEST_V1: &[u8] = include_bytes!("../../../manifests/load-manifest.v1.json");
pub const MANIFEST_V2: &[u8] = include_bytes!("../../../manifests/load-manifest.v2.json");
/// Scaling manifests derived from v2 (10× and 100× the arrival rate and the limits).
pub const MANIFEST_V3_X10: &[u8] = include_bytes!("../../../manifests/load-manifest.v3-x10.json");
pub const MANIFEST_V3_X100: &[u8] = include_bytes!("../../../manifests/load-manifest.v3-x100.json");
/// The token-fair scheduling manifest (issue 31): one provider lane in token mode, call sizes
/// 10× apart, weights 1 and 2, a batch band under a saturating interactive load, deadlines.
pub const MANIFEST_V3_TOKENS: &[u8] =
    include_bytes!("../../../manifests/load-manifest.v3-tokens.json");

/// REFERENCE §7's attempt deadline is `now + DEADLINE_SLACK_MS + serviceMs` (the controller
/// target, unless the principal sets `deadlineMs`; the evaluator target always).
pub const DEADLINE_SLACK_MS: u64 = 2000;

/// `(schema, digest)` of every manifest this build accepts; a schema may pin several files.
pub const PINNED_DIGESTS: &[(&str, &str)] = &[
    (
        "decision-load-manifest/v1",
        "sha256:9c6db981b0e1d124e317651ed15e8972fbf27b7a7596b15aa23ea3baac4bb03f",
    ),
    (
        "decision-load-manifest/v2",
        "sha256:416a41466dc58063f45b5e5e9a7ad78b011cf6d3be50b081bab6e47c76a28a0c",
    ),
    (
        "decision-load-manifest/v3",
        "sha256:d40913b0c44862dfd71fbc305fe0e0037b2daa30b0386a5e021b006167d3b4ea",
    ),
    (
        "decision-load-manifest/v3",
        "sha256:d26b54ec25e2cc5442875cf52e4ad0ec1576f0f95c99db08c945e25d94b65bb3",
    ),
    (
        "decision-load-manifest/v3",
        "sha256:87ba120526d34e7c99be88e8be8193e7209d1c2a1495cdc001f0067a4ad151fb",
    ),
];

/// A manifest that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest is not valid JSON of the expected shape: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("manifest digest {actual} does not match the pinned {expected} for {schema}")]
    DigestMismatch {
        schema: String,
        expected: String,
        actual: String,
    },
    #[error("manifest schema {0} has no pinned digest; a new manifest version must be pinned")]
    Unpinned(String),
    #[error("manifest limits are invalid: {0}")]
    InvalidLimits(#[from] turnstile_admission::ProfileError),
}

/// A principal of a v2-shaped manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestPrincipal {
    pub id: String,
    pub class: PrincipalClass,
    /// The load generator's share of the arrivals (cumulative draw), **not** the scheduling
    /// weight (that is `limits.weight`).
    pub weight: f64,
    /// The token estimate of every call (absent: the arrival model's small or huge draw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_tokens: Option<u64>,
    /// What every call actually uses, reported at release (absent: released without usage,
    /// so the estimate stands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_tokens: Option<u64>,
    /// The attempt deadline of the principal's calls, relative to the attempt (absent:
    /// `2000 + serviceMs`). Controller target only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// With `deadlineMs`: the share of the calls that carry it (one more draw per arrival of
    /// this principal); the others keep `2000 + serviceMs`. Absent: every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_share: Option<f64>,
    pub limits: Limits,
}

impl ManifestPrincipal {
    /// The tokens a call of `estimated` tokens actually uses.
    pub fn actual_tokens_of(&self, estimated: u64) -> u64 {
        self.actual_tokens.unwrap_or(estimated)
    }
}

/// Principal classes the quiet-admission bound distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrincipalClass {
    Noisy,
    Quiet,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceTime {
    pub minimum: u64,
    pub maximum: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArrivalModel {
    pub kind: String,
    pub seed: u32,
    pub average_requests_per_second: f64,
    pub spike_multiplier: f64,
    pub spike_duration_seconds: f64,
    pub small_tokens: u64,
    pub huge_tokens: u64,
    pub huge_token_share: f64,
    pub service_time_ms: ServiceTime,
    pub retryable_failure_rate: f64,
    pub max_retries: u32,
    pub retry_backoff_ms: u64,
    pub cancellation_rate: f64,
    pub cancel_after_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Duration {
    pub load_seconds: u64,
    pub spike_seconds: u64,
    pub soak_seconds: u64,
    pub evaluator_sample_seconds: u64,
}

impl Duration {
    /// load + spike + soak.
    pub fn window_seconds(&self) -> u64 {
        self.load_seconds + self.spike_seconds + self.soak_seconds
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PassFail {
    pub all_bounds_must_pass: bool,
    pub live_service_required: bool,
}

/// A v2-shaped load manifest (v2 and later versions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema: String,
    pub version: String,
    pub mode: String,
    pub profile_version: String,
    pub workspace: Limits,
    pub providers: BTreeMap<String, Limits>,
    pub principals: Vec<ManifestPrincipal>,
    pub arrival_model: ArrivalModel,
    pub duration: Duration,
    /// Bound name → limit, in manifest order of appearance (sorted by serde here).
    pub bounds: BTreeMap<String, f64>,
    pub pass_fail: PassFail,
}

/// A manifest with the digest of its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedManifest {
    pub manifest: Manifest,
    pub digest: String,
}

impl LoadedManifest {
    /// Parses `bytes` and checks their digest against the pinned one for the schema.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ManifestError> {
        Self::from_bytes_pinned(bytes, PINNED_DIGESTS)
    }

    /// As [`from_bytes`](Self::from_bytes) with an explicit pin table (for staged copies).
    pub fn from_bytes_pinned(bytes: &[u8], pins: &[(&str, &str)]) -> Result<Self, ManifestError> {
        let manifest: Manifest = serde_json::from_slice(bytes)?;
        let actual = sha256_digest(bytes);
        let pinned: Vec<&str> = pins
            .iter()
            .filter(|(schema, _)| *schema == manifest.schema)
            .map(|(_, digest)| *digest)
            .collect();
        if pinned.is_empty() {
            return Err(ManifestError::Unpinned(manifest.schema.clone()));
        }
        if !pinned.contains(&actual.as_str()) {
            return Err(ManifestError::DigestMismatch {
                schema: manifest.schema.clone(),
                expected: pinned.join(" or "),
                actual,
            });
        }
        manifest.profile().validate()?;
        Ok(LoadedManifest {
            manifest,
            digest: actual,
        })
    }

    /// The embedded v2 manifest.
    pub fn embedded_v2() -> Result<Self, ManifestError> {
        Self::from_bytes(MANIFEST_V2)
    }

    /// The embedded token-fair scheduling manifest (v3-tokens).
    pub fn embedded_v3_tokens() -> Result<Self, ManifestError> {
        Self::from_bytes(MANIFEST_V3_TOKENS)
    }
}

impl Manifest {
    /// The admission profile the manifest pins.
    pub fn profile(&self) -> Profile {
        Profile {
            workspace: self.workspace.clone(),
            providers: self.providers.clone(),
            principals: self
                .principals
                .iter()
                .map(|p| (p.id.clone(), p.limits.clone()))
                .collect(),
        }
    }

    /// Whether the profile asks for anything but the default order: a provider's `fairness`,
    /// a principal's `weight` or `priority`, or the workspace's `minShare`. Such a manifest's
    /// record carries the fair-share figures (`observations.fairShare`); v1 and v2 do not.
    pub fn shapes_order(&self) -> bool {
        self.workspace.min_share.is_some()
            || self.providers.values().any(|p| p.fairness.is_some())
            || self
                .principals
                .iter()
                .any(|p| p.limits.weight.is_some() || p.limits.priority.is_some())
    }

    /// Sorted provider IDs (the arrival generator's provider order).
    pub fn provider_ids(&self) -> Vec<&str> {
        self.providers.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_v2_is_pinned_and_valid() {
        let loaded = LoadedManifest::embedded_v2().unwrap();
        assert_eq!(loaded.manifest.duration.window_seconds(), 990);
        assert_eq!(loaded.manifest.principals.len(), 5);
    }

    #[test]
    fn a_changed_byte_is_refused() {
        let mut bytes = MANIFEST_V2.to_vec();
        let at = bytes.iter().position(|b| *b == b'4').unwrap();
        bytes[at] = b'5';
        assert!(matches!(
            LoadedManifest::from_bytes(&bytes),
            Err(ManifestError::DigestMismatch { .. }) | Err(ManifestError::Malformed(_))
        ));
    }
}
