//! Authentication: the caller's identity comes from its API key and nothing else.
//!
//! `Authorization: Bearer <key>` (the scheme is case-insensitive, RFC 9110 §11.1), or, without an
//! `Authorization` header, `x-api-key: <key>` (as the Anthropic SDK sends it). A missing,
//! malformed or unknown key is 401; a valid key that may not perform the call is 403 (see
//! the role table, [`access`], applied by [`authorize`]).
//!
//! The gate ([`admit`], as the [`crate::http::gate`] layer) runs before every handler: it
//! authenticates once, takes one of the key's `http.max_requests_per_key` request slots for the
//! whole request (429 `key-busy` and the connection closed past it), tells the proxy routes who
//! calls, and on a connection of the operators' reserved slice lets only health, metrics, the
//! OpenAPI document, the console page (`/ui`) and admin-key calls through (503 `overloaded`).
//!
//! The acting credential ([`ActingKey`], the key that authenticated a request) lives here too:
//! the gate makes it, the audit of admin changes reads it.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use crate::api::AppState;
use crate::http::error::ApiError;
use crate::keys::Caller;
use crate::metrics::Cut;
use turnstile_shell::{Command, Standing};

/// The key of an `Authorization` header, if it has the Bearer scheme (any case).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let header = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = header.trim().split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty() && key.len() <= 256).then_some(key)
}

/// The key of an `x-api-key` header (the Anthropic SDK's), used when there is no
/// `Authorization` header.
pub fn x_api_key(headers: &HeaderMap) -> Option<&str> {
    if headers.contains_key(AUTHORIZATION) {
        return None;
    }
    let key = headers.get("x-api-key")?.to_str().ok()?.trim();
    (!key.is_empty() && key.len() <= 256).then_some(key)
}

/// The caller and its key hash, if the request carries a known key.
fn authenticate(headers: &HeaderMap, state: &AppState) -> Option<([u8; 32], Caller)> {
    state
        .keys
        .authenticate(bearer(headers).or_else(|| x_api_key(headers))?)
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(authenticated) = parts.extensions.get::<Authenticated>() {
            return Ok(authenticated.caller.clone());
        }
        authenticate(&parts.headers, state)
            .map(|(_, caller)| caller)
            .ok_or(ApiError::Unauthorized)
    }
}

/// Whether a percent-encoded path decodes to UTF-8 (axum's path extractor answers a bare
/// `400 text/plain` otherwise; the gate answers the typed JSON error first).
pub fn path_is_utf8(path: &str) -> bool {
    if !path.contains('%') {
        // Nothing encoded: the path is the `&str` it already is.
        return true;
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                decoded.push(value as u8);
                i += 3;
            }
            (b, _, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    std::str::from_utf8(&decoded).is_ok()
}

/// Routes any client may call on a connection of the reserved slice.
const OPERATOR_PATHS: [&str; 4] = ["/healthz", "/readyz", "/metrics", "/openapi.json"];

/// What the gate ([`crate::http::gate`]) decides before the handler runs: authenticates once, takes
/// a per-key request slot (held until the handler answered), and guards the reserved slice.
pub fn admit(state: &AppState, reserved: bool, request: &mut Request) -> Admitted {
    if !path_is_utf8(request.uri().path()) {
        return Admitted::Answered(
            ApiError::invalid(
                "path",
                "the request path is not valid UTF-8 once percent-decoded",
            )
            .into_response(),
        );
    }
    let authenticated = authenticate(request.headers(), state);
    if reserved {
        let path = request.uri().path();
        // The console's page and assets carry no data; its API calls use the admin key.
        let console = path == "/ui" || path.starts_with("/ui/");
        let operator = OPERATOR_PATHS.contains(&path)
            || console
            || matches!(authenticated, Some((_, Caller::Admin)));
        if !operator {
            state.metrics.cut(Cut::Overloaded);
            return Admitted::Answered(ApiError::Overloaded.into_response());
        }
    }
    let Some((hash, caller)) = authenticated else {
        return Admitted::Through {
            slot: None,
            authenticated: None,
        };
    };
    let Some(slot) = state.key_slots.take(hash) else {
        state.metrics.cut(Cut::KeyCap);
        return Admitted::Answered(
            ApiError::KeyBusy("this key has http.max_requests_per_key requests in flight")
                .into_response(),
        );
    };
    // The proxy routes learn who calls in their own terms (without a key they answer 401 in
    // the provider's format).
    let path = request.uri().path();
    if path.starts_with("/openai/") || path.starts_with("/anthropic/") {
        let identity = match &caller {
            Caller::Principal {
                workspace,
                principal,
            } => turnstile_proxy::Identity::Principal {
                workspace: workspace.clone(),
                principal: principal.clone(),
            },
            Caller::Admin => turnstile_proxy::Identity::Admin,
        };
        request.extensions_mut().insert(identity);
    }
    Admitted::Through {
        slot: Some(slot),
        authenticated: Some(Authenticated {
            caller,
            acting: ActingKey::of_hash(&hash),
        }),
    }
}

/// Who a request's key authenticated. The gate attaches it to a request for the router as one
/// request extension (each extension is a boxed map entry), read by the [`Caller`] and
/// [`ActingKey`] extractors; the hot routes get it directly.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub caller: Caller,
    pub acting: ActingKey,
}

/// The acting credential of a request: the API key that authenticated it, by its hash (the key
/// ID, `key_…` of [`crate::keys::key_id`], is derived only when a handler records it: the gate
/// runs for every request, the audit for few).
///
/// The gate attaches one to every authenticated request (inside [`Authenticated`]); handlers
/// that make an admin change (profile registrations and rollbacks, key revocations) store its
/// key ID with the change's audit record, so the audit log says who changed what and when.
///
/// Invariant: a key ID names a credential, never a principal or workspace; it is written to the
/// audit log (SQLite) and returned by authenticated API answers only, never to a log line, a
/// span or a metric label. It reveals nothing usable about the key (64 bits of its hash).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActingKey([u8; 32]);

impl ActingKey {
    /// The acting key of a key hash.
    pub fn of_hash(hash: &[u8; 32]) -> Self {
        ActingKey(*hash)
    }

    /// Its key ID (`key_…`).
    pub fn key_id(&self) -> String {
        crate::keys::key_id(&hex::encode(&self.0[..8]))
    }
}

impl FromRequestParts<AppState> for ActingKey {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Set by the gate for every request that carries a known key; absent means no key.
        parts
            .extensions
            .get::<Authenticated>()
            .map(|authenticated| authenticated.acting)
            .ok_or(ApiError::Unauthorized)
    }
}

/// What the gate decided.
pub enum Admitted {
    /// The handler runs; with the key's slot and its caller when a key authenticated.
    Through {
        slot: Option<KeySlot>,
        authenticated: Option<Authenticated>,
    },
    /// The gate's own answer (the handler does not run).
    Answered(Response),
}

/// One of a key's in-flight request slots.
pub type KeySlot = crate::http::slots::Slot<[u8; 32]>;

/// Every call that needs a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Register a profile revision (`PUT …/profiles/{profileVersion}`).
    RegisterProfile,
    /// Read the profile registrations (`GET …/profiles`).
    ReadProfiles,
    /// Read the breaker and pause history (`GET …/breakers`, `GET …/pauses`).
    ReadBreakers,
    /// Read the workspace snapshot (`GET …/snapshot`).
    ReadSnapshot,
    /// Create a principal key (`POST …/keys`).
    CreateKey,
    /// List the principal keys (`GET …/keys`).
    ListKeys,
    /// Revoke a principal key (`DELETE …/keys/{keyId}`).
    RevokeKey,
    /// Ask for an admission (`POST /v1/admissions`).
    Acquire,
    /// Release a lease (`POST /v1/leases/{leaseId}/release`).
    ReleaseLease,
    /// Extend a lease (`POST /v1/leases/{leaseId}/heartbeat`).
    HeartbeatLease,
    /// Release a budget (`POST /v1/budgets/{budgetId}/release`).
    ReleaseBudget,
    /// Pause a provider lane for its retry-after (`POST /v1/providers/{providerId}/retry-after`).
    PauseProvider,
    /// `GET …/profiles/{profileVersion}`: a revision's limits (the console's diff and rollback).
    ReadProfileRevision,
    /// `GET …/events`: the live feed (admin: every workspace, with per-principal fairness).
    WatchEvents,
    /// `GET …/fairness`: the fairness window (admin: every principal; a principal key: the
    /// totals and its own row).
    ReadFairness,
    /// `GET /v1/workspaces`: the workspaces the key may see (admin: every one with a profile;
    /// a principal key: its own).
    ListWorkspaces,
}

/// Who a key stands for, as far as permissions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An admin key.
    Admin,
    /// A principal the workspace's current profile names.
    Principal,
    /// A principal with a valid key that the current profile does not name.
    UnnamedPrincipal,
}

/// What a role may do with an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Never (403).
    Denied,
    /// On any workspace.
    Any,
    /// On its own workspace only (another workspace is 403).
    OwnWorkspace,
    /// On leases it holds only (another's lease is 404, like an unknown one).
    OwnLeases,
}

impl Operation {
    /// Every operation, in the role table's order.
    pub const ALL: [Operation; 16] = [
        Operation::RegisterProfile,
        Operation::ReadProfiles,
        Operation::ReadBreakers,
        Operation::ReadSnapshot,
        Operation::CreateKey,
        Operation::ListKeys,
        Operation::RevokeKey,
        Operation::Acquire,
        Operation::ReleaseLease,
        Operation::HeartbeatLease,
        Operation::ReleaseBudget,
        Operation::PauseProvider,
        Operation::ReadProfileRevision,
        Operation::WatchEvents,
        Operation::ReadFairness,
        Operation::ListWorkspaces,
    ];
}

/// **The role table**: the one place that says which role may make which call (mirrored in
/// `docs/server.md`, tested call by call in `tests/permissions.rs`). A principal the profile
/// does not name may only read its own workspace and release its own leases; its admissions
/// are refused by the core
/// (403 `disabled`, a typed rejection with evidence).
pub const fn access(role: Role, operation: Operation) -> Access {
    use Access::{Any, Denied, OwnLeases, OwnWorkspace};
    use Operation as Op;
    match (operation, role) {
        (
            Op::RegisterProfile
            | Op::CreateKey
            | Op::ListKeys
            | Op::RevokeKey
            | Op::ReadProfileRevision,
            Role::Admin,
        ) => Any,
        (
            Op::RegisterProfile
            | Op::CreateKey
            | Op::ListKeys
            | Op::RevokeKey
            | Op::ReadProfileRevision,
            _,
        ) => Denied,
        (
            Op::ReadProfiles
            | Op::ReadBreakers
            | Op::ReadSnapshot
            | Op::WatchEvents
            | Op::ReadFairness
            | Op::ListWorkspaces,
            Role::Admin,
        ) => Any,
        (
            Op::ReadProfiles
            | Op::ReadBreakers
            | Op::ReadSnapshot
            | Op::WatchEvents
            | Op::ReadFairness
            | Op::ListWorkspaces,
            _,
        ) => OwnWorkspace,
        (Op::Acquire | Op::ReleaseBudget | Op::PauseProvider, Role::Principal) => OwnWorkspace,
        (Op::ReleaseLease | Op::HeartbeatLease, Role::Principal) => OwnLeases,
        // A principal the profile stopped naming may still give back what it holds (its
        // permits would otherwise stay taken until their TTL), but not extend it.
        (Op::ReleaseLease, Role::UnnamedPrincipal) => OwnLeases,
        (
            Op::Acquire | Op::ReleaseBudget | Op::PauseProvider | Op::HeartbeatLease,
            Role::Admin | Role::UnnamedPrincipal,
        ) => Denied,
        (Op::ReleaseLease, Role::Admin) => Denied,
    }
}

/// Checks `caller` may make `operation` (on `workspace`, for workspace-scoped reads), by the
/// role table. A principal's standing under the current profile is asked of the driver only
/// for the calls an unnamed principal may not make (acquire excepted: the core refuses it with
/// its typed `disabled` rejection).
pub async fn authorize(
    state: &AppState,
    caller: &Caller,
    operation: Operation,
    workspace: Option<&str>,
) -> Result<(), ApiError> {
    let (own_workspace, principal) = match caller {
        Caller::Admin => {
            return match access(Role::Admin, operation) {
                Access::Denied => Err(ApiError::Forbidden(
                    "this call needs a principal key (admin keys do not act as a principal)",
                )),
                _ => Ok(()),
            };
        }
        Caller::Principal {
            workspace,
            principal,
        } => (workspace, principal),
    };
    match access(Role::Principal, operation) {
        Access::Denied => return Err(ApiError::Forbidden("this call needs an admin key")),
        Access::OwnWorkspace if workspace.is_some_and(|w| w != &**own_workspace) => {
            return Err(ApiError::Forbidden(
                "this principal key belongs to another workspace",
            ));
        }
        _ => {}
    }
    if operation == Operation::Acquire
        || access(Role::UnnamedPrincipal, operation) != Access::Denied
    {
        return Ok(());
    }
    let standing = state
        .driver
        .ask(|reply| Command::Standing {
            workspace: own_workspace.clone(),
            principal: principal.clone(),
            reply,
        })
        .await?;
    match standing {
        Standing::NotNamed => Err(ApiError::Forbidden(
            "the workspace's current profile does not name this principal: it may only read its workspace",
        )),
        Standing::Named | Standing::NoProfile => Ok(()),
    }
}

/// The principal and workspace of a principal caller (after [`authorize`]).
pub fn require_principal(caller: &Caller) -> Result<(Arc<str>, Arc<str>), ApiError> {
    match caller {
        Caller::Principal {
            workspace,
            principal,
        } => Ok((workspace.clone(), principal.clone())),
        Caller::Admin => Err(ApiError::Forbidden(
            "this call needs a principal key (admin keys do not act as a principal)",
        )),
    }
}
