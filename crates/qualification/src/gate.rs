//! Gate G5 flags from a set of load result records.
//!
//! - `load-manifest-offline-passed`: at least one offline record, and every offline record
//!   verifies against the expected manifest digest and passes.
//! - `load-manifest-qualified`: at least one verified, passing `staged-provider` record bound to
//!   its own manifest, and every record verifying and passing. Offline evidence alone never sets
//!   it.

use serde::{Deserialize, Serialize};

use crate::record::{LoadResultRecord, Mode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct G5Flags {
    #[serde(rename = "load-manifest-offline-passed")]
    pub offline_passed: bool,
    #[serde(rename = "load-manifest-qualified")]
    pub qualified: bool,
}

/// Gate status, with the evidence it still misses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateStatus {
    pub status: String,
    pub missing: Vec<String>,
}

/// A record with the manifest digest it must be bound to.
pub struct BoundRecord<'a> {
    pub record: &'a LoadResultRecord,
    pub expected_manifest_digest: &'a str,
}

impl BoundRecord<'_> {
    fn good(&self) -> bool {
        self.record.verify(self.expected_manifest_digest).is_ok() && self.record.passed
    }
}

pub fn g5_flags(records: &[BoundRecord<'_>]) -> G5Flags {
    let offline: Vec<&BoundRecord<'_>> = records
        .iter()
        .filter(|r| r.record.mode == Mode::OfflineFakeProvider)
        .collect();
    let offline_passed = !offline.is_empty() && offline.iter().all(|r| r.good());
    let staged_ok = records
        .iter()
        .any(|r| r.record.mode == Mode::StagedProvider && r.good());
    let qualified = staged_ok && records.iter().all(|r| r.good());
    G5Flags {
        offline_passed,
        qualified,
    }
}

/// Gate G5 passes only when the manifest is qualified.
pub fn g5_status(flags: G5Flags) -> GateStatus {
    if flags.qualified {
        GateStatus {
            status: "pass".into(),
            missing: Vec::new(),
        }
    } else {
        GateStatus {
            status: "fail".into(),
            missing: vec!["evidence:load-manifest-qualified".into()],
        }
    }
}
