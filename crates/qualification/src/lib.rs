//! turnstile-qualification: pinned load manifests, the arrival generator, the load harness on
//! virtual time (the `admission-controller` target in `harness`, the `evaluator` target in
//! `evaluator_target`), `decision-load-result/v1` records and the gate G5 flags (REFERENCE §7).
#![forbid(unsafe_code)]

pub mod arrivals;
pub mod deadline_ab;
pub mod evaluator_target;
pub mod fair_share;
pub mod gate;
pub mod harness;
pub mod manifest;
pub mod observations;
pub mod qualify;
pub mod record;
pub mod report;
pub mod resources;
