//! The HTTP surface, around the handlers (`api/`): the accept loop and its connection
//! deadlines and caps (`serve.rs`, `conn.rs`, `slots.rs`, `fresh.rs`), the gate before every handler
//! (`gate.rs`) and the panic catcher around it (`panics.rs`), the route table (`routes.rs`), request bodies and typed errors (`body.rs`,
//! `error.rs`), the statuses of admission reasons (`status.rs`), the hand-written answers of the
//! two hot routes (`hot_routes.rs`, `json_answer.rs`, `lease_answer.rs`), and the console
//! (`ui.rs`).
//!
//! Invariants: every connection phase is bounded in time and every client's share of
//! connections, requests and pending admissions is capped; a handler's panic is one 500
//! answer, never a dropped connection; the hand-written answers are byte
//! for byte what serde writes (each guarded by a test).

pub(crate) mod body;
pub(crate) mod conn;
pub(crate) mod error;
pub(crate) mod fresh;
pub(crate) mod gate;
pub(crate) mod hot_routes;
pub(crate) mod json_answer;
pub(crate) mod lease_answer;
pub(crate) mod panics;
pub(crate) mod routes;
pub(crate) mod serve;
pub(crate) mod slot_held_body;
pub(crate) mod slots;
pub(crate) mod status;
pub(crate) mod ui;
