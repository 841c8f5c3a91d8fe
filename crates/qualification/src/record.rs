//! `decision-load-result/v1`: a digest-bound record of one load run, and its verification.
//!
//! The record's `digest` is `"sha256:" + sha256(canonical JSON of the record without digest)`.
//! A record verifies when its schema is right, its manifest digest is the expected one, and its
//! digest recomputes. Every bound compares `observed <= limit`, except the `minimum…` ones
//! (`observed >= limit`): `minimumQuietPrincipalAdmissionRatio`, and for the token manifest
//! `minimumJainIndexWeightedTokens` and `minimumBatchContendedGrantShare`.
//!
//! The record also says which build produced it (`build.profile`, `release` or `debug`): the
//! `resources` host samples are only meaningful for a release build, and because `build` is part
//! of the digested body, a debug run cannot pass as a release one.

use serde::{Deserialize, Serialize};
use turnstile_admission::digest::{canonical_digest, CanonicalJsonError};
use turnstile_admission::Priority;

use crate::manifest::LoadedManifest;
use crate::observations::Observations;
use crate::resources::Resources;

pub const RECORD_SCHEMA: &str = "decision-load-result/v1";

/// How the provider side of the run was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Fake providers on virtual time.
    OfflineFakeProvider,
    /// A staged run against a real provider (produced outside CI).
    StagedProvider,
}

/// Which path the arrivals went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    AdmissionController,
    Evaluator,
}

impl Target {
    pub fn as_str(self) -> &'static str {
        match self {
            Target::AdmissionController => "admission-controller",
            Target::Evaluator => "evaluator",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestRef {
    pub schema: String,
    pub version: String,
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    pub seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    pub os: String,
    pub arch: String,
    pub cpus: u64,
    pub implementation: String,
}

impl Environment {
    pub fn current() -> Self {
        Environment {
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            implementation: format!("turnstile {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// The cargo profile of the code that ran the target (and sampled its `resources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuildProfile {
    /// Optimised, without debug assertions (`cargo run --release`).
    Release,
    /// With debug assertions (`cargo test`, `cargo run`): resources are not representative.
    Debug,
}

/// Which build produced a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Build {
    pub profile: BuildProfile,
}

impl Build {
    /// The build of this code: `debug` when compiled with debug assertions, else `release`.
    pub fn current() -> Self {
        Build {
            profile: if cfg!(debug_assertions) {
                BuildProfile::Debug
            } else {
                BuildProfile::Release
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    pub bound: String,
    pub limit: f64,
    pub observed: f64,
    pub pass: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadResultRecord {
    pub schema: String,
    pub manifest: ManifestRef,
    pub mode: Mode,
    pub target: Target,
    pub window: Window,
    pub environment: Environment,
    /// The build that ran the target and sampled `resources`.
    pub build: Build,
    pub observations: Observations,
    pub resources: Resources,
    pub comparisons: Vec<Comparison>,
    pub passed: bool,
    #[serde(default)]
    pub digest: String,
}

/// Why a record does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("record schema is {0}, expected decision-load-result/v1")]
    Schema(String),
    #[error("record is bound to manifest {actual}, expected {expected}")]
    ManifestDigest { expected: String, actual: String },
    #[error("record digest does not recompute")]
    Digest,
}

/// The observed value of a bound, if the run measured it (a fair-share or deadline bound of a
/// run without that block, or without a figure for it, was not measured and fails closed).
fn observed(bound: &str, observations: &Observations, resources: &Resources) -> Option<f64> {
    Some(match bound {
        "maximumActiveCalls" => observations.maximum_active_calls as f64,
        "maximumQueuedCalls" => observations.maximum_queued_calls as f64,
        "maximumHeapUsedMiB" | "maximumResidentMemoryMiB" => resources.peak_memory_mib,
        "maximumCpuPercentOneCore" => resources.cpu_percent_one_core,
        "maximumEligibleLaneWaitMs" => observations.maximum_eligible_lane_wait_ms as f64,
        "maximumRetryAmplificationRatio" => observations.retry_amplification_ratio,
        "maximumCancellationLatencyMs" => observations.maximum_cancellation_latency_ms as f64,
        "minimumQuietPrincipalAdmissionRatio" => observations.quiet_principal_admission_ratio,
        "minimumJainIndexWeightedTokens" => {
            observations.fair_share.as_ref()?.minimum_jain_index()?
        }
        "maximumWeightedTokenShareError" => observations
            .fair_share
            .as_ref()?
            .maximum_weighted_share_error()?,
        "minimumBatchContendedGrantShare" => observations
            .fair_share
            .as_ref()?
            .contended_grant_share(Priority::Batch)?,
        "maximumFalseDeadlineRefusals" => {
            observations.deadline_refusals.as_ref()?.false_refusals as f64
        }
        _ => return None,
    })
}

/// Compares every bound of the manifest; an unknown bound fails closed.
pub fn compare(
    manifest: &LoadedManifest,
    observations: &Observations,
    resources: &Resources,
) -> Vec<Comparison> {
    manifest
        .manifest
        .bounds
        .iter()
        .map(
            |(bound, &limit)| match observed(bound, observations, resources) {
                Some(value) => Comparison {
                    bound: bound.clone(),
                    limit,
                    observed: value,
                    pass: if bound.starts_with("minimum") {
                        value >= limit
                    } else {
                        value <= limit
                    },
                },
                None => Comparison {
                    bound: bound.clone(),
                    limit,
                    observed: 0.0,
                    pass: false,
                },
            },
        )
        .collect()
}

impl LoadResultRecord {
    /// Builds and seals a record.
    pub fn new(
        manifest: &LoadedManifest,
        mode: Mode,
        target: Target,
        window_seconds: u64,
        observations: Observations,
        resources: Resources,
    ) -> Result<Self, CanonicalJsonError> {
        let comparisons = compare(manifest, &observations, &resources);
        let passed = comparisons.iter().all(|c| c.pass)
            && observations.shed
                + observations.completed
                + observations.failed
                + observations.cancelled
                == observations.arrivals;
        let mut record = LoadResultRecord {
            schema: RECORD_SCHEMA.to_owned(),
            manifest: ManifestRef {
                schema: manifest.manifest.schema.clone(),
                version: manifest.manifest.version.clone(),
                digest: manifest.digest.clone(),
            },
            mode,
            target,
            window: Window {
                seconds: window_seconds,
            },
            environment: Environment::current(),
            build: Build::current(),
            observations,
            resources,
            comparisons,
            passed,
            digest: String::new(),
        };
        record.digest = record.compute_digest()?;
        Ok(record)
    }

    /// The digest of the record without its `digest` field.
    pub fn compute_digest(&self) -> Result<String, CanonicalJsonError> {
        let mut value = serde_json::to_value(self)?;
        if let Some(object) = value.as_object_mut() {
            object.remove("digest");
        }
        canonical_digest(&value)
    }

    /// Checks schema, manifest binding and digest.
    pub fn verify(&self, expected_manifest_digest: &str) -> Result<(), VerifyError> {
        if self.schema != RECORD_SCHEMA {
            return Err(VerifyError::Schema(self.schema.clone()));
        }
        if self.manifest.digest != expected_manifest_digest {
            return Err(VerifyError::ManifestDigest {
                expected: expected_manifest_digest.to_owned(),
                actual: self.manifest.digest.clone(),
            });
        }
        match self.compute_digest() {
            Ok(digest) if digest == self.digest => Ok(()),
            _ => Err(VerifyError::Digest),
        }
    }
}
