"""Wire types: the JSON bodies of the admission API, as in `crates/server/openapi.json`.

Request and response bodies keep the service's camelCase keys (they are JSON documents);
the client's own API (method arguments, lease and exception attributes) is snake_case.
`tests/test_openapi.py` compares every TypedDict reachable from `OPERATIONS` with the
OpenAPI document, in both directions, so a field the service gains or drops fails the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, Union

Reason = Literal[
    "admitted",
    "disabled",
    "cancelled",
    "deadline-exceeded",
    "deadline-unreachable",
    "concurrency",
    "requests-per-minute",
    "tokens-per-second",
    "attempts",
    "batch-size",
    "cost",
    "unknown-cost",
    "tokens",
    "unknown-tokens",
    "queue-full",
    "queue-timeout",
    "invalid-estimate",
    "request-too-large",
    "too-many-items",
    "retained-work",
    "unknown-retained-work",
    "retry-after",
    "circuit-open",
    "unconfigured-provider",
    "too-many-budgets",
    "coordination-unavailable",
]
Outcome = Literal["success", "failure", "retry-after", "none"]
Decision = Literal["admit", "defer", "reject"]
BreakerState = Literal["closed", "open", "half-open"]
# Which limit holds a queued lane back (`BindingCount.binding`): a scope and a kind of limit,
# or the provider's pause, breaker or announced quota.
Binding = Literal[
    "principal-concurrency",
    "workspace-concurrency",
    "provider-concurrency",
    "workspace-share",
    "provider-share",
    "workspace-reservation",
    "provider-reservation",
    "principal-requests",
    "workspace-requests",
    "provider-requests",
    "principal-tokens",
    "workspace-tokens",
    "provider-tokens",
    "provider-pause",
    "provider-breaker",
    "provider-quota-requests",
    "provider-quota-tokens",
]
ChangeKind = Literal["initial", "change", "rollback"]
RolloutMode = Literal["shadow", "canary"]
RolloutEvent = Literal["started", "promoted", "aborted"]
PauseCause = Literal["retry-after-call", "release-outcome"]
Coordination = Literal["shared", "degraded"]
# Which cap refused a budget (`too-many-budgets`).
BudgetCap = Literal["principal", "workspace"]
# What a provider lane's turns are fair in (`Limits.fairness`).
Fairness = Literal["requests", "tokens"]
# The band a principal's requests wait in (`Limits.priority`), highest first.
Priority = Literal["interactive", "standard", "batch"]

# Estimate values: the service also accepts numeric strings; malformed values are answered
# `invalid-estimate` (422).
EstimateValue = Union[int, float, str, None]


class Estimate(TypedDict, total=False):
    """What the call is expected to use (the client's snake_case spelling)."""

    tokens: EstimateValue
    cost_usd: EstimateValue
    request_bytes: EstimateValue
    items: EstimateValue
    attempts: EstimateValue
    batch_size: EstimateValue
    retained_work: EstimateValue


# snake_case key of `Estimate` -> wire key of the OpenAPI `Estimate` schema.
ESTIMATE_WIRE_KEYS: dict[str, str] = {
    "tokens": "tokens",
    "cost_usd": "costUsd",
    "request_bytes": "requestBytes",
    "items": "items",
    "attempts": "attempts",
    "batch_size": "batchSize",
    "retained_work": "retainedWork",
}


class WireEstimate(TypedDict, total=False):
    tokens: EstimateValue
    costUsd: EstimateValue
    requestBytes: EstimateValue
    items: EstimateValue
    attempts: EstimateValue
    batchSize: EstimateValue
    retainedWork: EstimateValue


class _AdmissionRequestRequired(TypedDict):
    providerId: str
    budgetId: str
    estimate: WireEstimate


class AdmissionRequest(_AdmissionRequestRequired, total=False):
    deadlineMs: int


# `from` is a Python keyword: the functional syntax.
BreakerTransition = TypedDict(
    "BreakerTransition",
    {
        "providerId": str,
        "from": BreakerState,
        "to": BreakerState,
        "atEpochMs": int,
        "failures": int,
    },
    total=False,
)


class Evidence(TypedDict, total=False):
    decision: Decision
    reason: Reason
    queueDelayMs: int
    active: int
    queued: int
    estimatedTokens: int | None
    estimatedCostUsd: float | None
    retryPressure: int
    breakerState: BreakerState
    retryAfterMs: int
    # On a `deadline-unreachable` refusal only: the wait the lane predicted (= retryAfterMs).
    predictedWaitMs: int
    # Held by the provider's announced quota (its rate-limit headers) while it waited.
    providerQuota: bool
    breakerTransitions: list[BreakerTransition]
    budgetOpened: bool
    # On a `too-many-budgets` refusal only: which cap refused.
    budgetCap: BudgetCap
    coordination: Coordination
    # Only on an answer a canary rollout's candidate decided: the candidate's revision.
    profileRevision: str


class LeaseBody(TypedDict, total=False):
    leaseId: str
    expiresAtEpochMs: int
    ttlMs: int
    evidence: Evidence


class Rejection(TypedDict, total=False):
    reason: Reason
    retryable: bool
    evidence: Evidence


class _ErrorRequired(TypedDict):
    error: str
    message: str


class ErrorBody(_ErrorRequired, total=False):
    field: str
    maximum: int


class ActualUsage(TypedDict, total=False):
    tokens: int
    costUsd: float


class _ReleaseRequestRequired(TypedDict):
    outcome: Outcome


class ReleaseRequest(_ReleaseRequestRequired, total=False):
    retryAfterMs: int
    actualUsage: ActualUsage


class ReleaseResult(TypedDict, total=False):
    released: bool
    breakerTransitions: list[BreakerTransition]


class HeartbeatResult(TypedDict, total=False):
    leaseId: str
    expiresAtEpochMs: int


class BudgetReleaseResult(TypedDict, total=False):
    released: bool


class RetryAfterRequest(TypedDict):
    retryAfterMs: int


class PauseResult(TypedDict, total=False):
    pausedUntilEpochMs: int


class ProviderSnapshot(TypedDict, total=False):
    """Per provider lane in a snapshot (the OpenAPI document leaves this object untyped)."""

    active: int
    queued: int
    breakerState: BreakerState
    pausedUntil: int | None


class Snapshot(TypedDict, total=False):
    active: int
    queued: int
    retryPressure: int
    openBudgets: int
    peakActive: int
    peakQueued: int
    providers: dict[str, ProviderSnapshot]
    leases: int
    waiters: int


class CircuitBreakerLimits(TypedDict, total=False):
    failureThreshold: int
    openMs: int
    halfOpenMaxCalls: int


class MinShare(TypedDict, total=False):
    """A lower band's smallest share of a lane's grants while higher bands saturate it."""

    standard: float | None
    batch: float | None


class Limits(TypedDict, total=False):
    concurrency: int
    requestsPerMinute: int
    requestsBurst: int
    tokensPerSecond: int
    tokensBurst: int
    maxAttempts: int
    maxTokens: int
    maxOpenBudgets: int
    maxBatchSize: int
    maxRequestBytes: int
    maxItems: int
    maxRetainedWork: int
    maxQueueLength: int
    maxQueueWaitMs: int
    reservedConcurrency: int
    maxCostUsd: float
    allowUnknownCost: bool
    maxPrincipalShare: float
    circuitBreaker: CircuitBreakerLimits
    # Provider scope only: `requests` (absent) or `tokens`.
    fairness: Fairness | None
    # Principal scope only: within [0.01, 100], default 1.
    weight: float | None
    # Principal scope only: default `standard`.
    priority: Priority | None
    # Workspace scope only: defaults standard 0.2, batch 0.1.
    minShare: MinShare | None


class _ProfileRequired(TypedDict):
    workspace: Limits
    providers: dict[str, Limits]


class Profile(_ProfileRequired, total=False):
    principals: dict[str, Limits]
    # Request only (`register_profile`): the approval on record of the change, not part of the
    # revision (never answered inside a profile).
    note: str | None
    approvedBy: str | None


class ProfileChangeRecord(TypedDict, total=False):
    schema: str
    workspaceId: str
    kind: ChangeKind
    previousProfileVersion: str | None
    profileVersion: str
    digest: str
    atEpochMs: int
    # The keyId of the admin key that made the change (None: first start, or an older record).
    actorKeyId: str | None
    # The approval on record: the operator's note and who approved (None when not given).
    note: str | None
    approvedBy: str | None


class ProfileUnchanged(TypedDict, total=False):
    unchanged: bool
    profileVersion: str


class ProfileHistory(TypedDict, total=False):
    records: list[ProfileChangeRecord]


class BreakerHistory(TypedDict, total=False):
    records: list[BreakerTransition]


class CandidateOnly(TypedDict, total=False):
    admit: int
    queue: int
    refuse: int


class RolloutDecisions(TypedDict, total=False):
    """A rollout's decision comparison: counts only, never a principal or workspace."""

    compared: int
    agree: int
    differ: int
    # Differing arrivals by the candidate's reason (`admitted` for an admit).
    byReason: dict[str, int]
    candidateOnly: CandidateOnly


class Rollout(TypedDict, total=False):
    """The running rollout (`start_rollout`, `current_rollout`)."""

    workspaceId: str
    revision: str
    digest: str
    mode: RolloutMode
    canaryShare: float | None
    startedAtEpochMs: int
    decisions: RolloutDecisions


class RolloutRecord(TypedDict, total=False):
    """A rollout's audit record (`turnstile-rollout/v1`): started, promoted or aborted."""

    schema: str
    event: RolloutEvent
    revision: str
    digest: str
    mode: RolloutMode
    canaryShare: float | None
    startedAtEpochMs: int
    endedAtEpochMs: int | None
    decisions: RolloutDecisions | None
    atEpochMs: int
    actorKeyId: str | None
    note: str | None
    approvedBy: str | None


class RolloutHistory(TypedDict, total=False):
    records: list[RolloutRecord]


class _RolloutStartRequired(TypedDict):
    revision: str
    profile: Profile
    mode: RolloutMode


class RolloutStartRequest(_RolloutStartRequired, total=False):
    canaryShare: float
    note: str | None
    approvedBy: str | None


class RolloutEndRequest(TypedDict, total=False):
    note: str | None
    approvedBy: str | None


class ProfileRevision(TypedDict, total=False):
    """`GET …/profiles/{profileVersion}` (admin): a revision's limits as first registered."""

    workspaceId: str
    profileVersion: str
    digest: str
    registeredAtEpochMs: int
    profile: Profile


class PauseRecord(TypedDict, total=False):
    """A Retry-After pause of a provider lane (`turnstile-provider-pause/v1`, audit log)."""

    schema: str
    providerId: str
    retryAfterMs: int
    untilEpochMs: int
    atEpochMs: int
    cause: PauseCause


class PauseHistory(TypedDict, total=False):
    records: list[PauseRecord]


class PrincipalShare(TypedDict, total=False):
    principalId: str
    grants: int
    share: float
    meanQueueDelayMs: float
    # Tokens served in the window: per grant, the usage its release reported, else its estimate.
    tokens: int
    tokenShare: float
    # From the profile in force (None: the profile no longer names the principal).
    weight: float | None
    priority: Priority | None


class MinuteGrants(TypedDict, total=False):
    startEpochMs: int
    grants: int
    queueDelayMs: int
    tokens: int


class ProviderFairness(TypedDict, total=False):
    """A provider lane of the profile in force and what its turns are fair in."""

    providerId: str
    fairness: Fairness


class WorkspaceEntry(TypedDict, total=False):
    """One workspace a key may see and its current revision (None: no profile yet)."""

    workspaceId: str
    profileVersion: str | None


class WorkspaceList(TypedDict, total=False):
    """`GET /v1/workspaces`: an admin key sees every workspace with a profile, a principal key
    its own."""

    workspaces: list[WorkspaceEntry]


class FairnessView(TypedDict, total=False):
    """`GET …/fairness`: grants and tokens served per principal over the last five minutes
    (server-side window), with weights, bands and each lane's fairness mode."""

    atEpochMs: int
    fromEpochMs: int
    bucketMs: int
    totalGrants: int
    meanQueueDelayMs: float
    unattributedGrants: int
    principals: list[PrincipalShare]
    minutes: list[MinuteGrants]
    totalTokens: int
    unattributedTokens: int
    providers: list[ProviderFairness]


# The live event feed (`GET …/events`, server-sent events): the JSON of an `update` event is a
# `FeedUpdate`, of a `lagged` event a `FeedLagged`. `_events.py` turns them into `Update` and
# `Lagged` objects.


class LaneBucket(TypedDict, total=False):
    """A token bucket of a lane: tokens available now, and its capacity (the burst)."""

    available: int
    capacity: int


class BindingCount(TypedDict, total=False):
    """How many of a provider's queued lanes (one per principal with waiters) a limit holds."""

    binding: Binding
    lanes: int


class LaneView(TypedDict, total=False):
    """One provider lane as the console shows it (`LaneView` in the OpenAPI document)."""

    providerId: str
    active: int
    # None: the lane has no concurrency limit.
    concurrency: int | None
    queued: int
    oldestWaitMs: int | None
    # None: the lane has no requests-per-minute / tokens-per-second limit.
    requests: LaneBucket | None
    tokens: LaneBucket | None
    breakerState: BreakerState
    # While open: epoch ms of the next probe.
    nextProbeAt: int | None
    # While paused: epoch ms the pause ends.
    pausedUntil: int | None
    # Which limits hold the queued lanes, most lanes first (empty when nothing waits).
    bindings: list[BindingCount]


class DecisionCount(TypedDict, total=False):
    """Final admission answers of one provider lane with one reason (`admitted` or a refusal)."""

    providerId: str
    reason: Reason
    count: int


class PrincipalTally(TypedDict, total=False):
    """Grants of one principal and the queue delay they waited, summed (admin keys only)."""

    principalId: str
    grants: int
    queueDelayMs: int


class FeedPause(TypedDict, total=False):
    """A Retry-After pause as the feed reports it (a `PauseRecord` without `schema`)."""

    providerId: str
    retryAfterMs: int
    untilEpochMs: int
    atEpochMs: int
    cause: PauseCause


class FeedProfileChange(TypedDict, total=False):
    """A profile change as the feed reports it (the core's record: no `actorKeyId`)."""

    schema: str
    workspaceId: str
    kind: ChangeKind
    previousProfileVersion: str | None
    profileVersion: str
    digest: str
    atEpochMs: int


class FeedUpdate(TypedDict, total=False):
    """The JSON of an `update` event: the lanes at `atEpochMs`, and what happened in
    `(sinceEpochMs, atEpochMs]`."""

    atEpochMs: int
    sinceEpochMs: int
    lanes: list[LaneView]
    decisions: list[DecisionCount]
    # Admin keys only (absent or empty for a principal key).
    principals: list[PrincipalTally]
    transitions: list[BreakerTransition]
    pauses: list[FeedPause]
    profileChange: FeedProfileChange
    # Transitions and pauses left out of this event (more than 64 in one flush).
    dropped: int


class FeedLagged(TypedDict):
    """The JSON of a `lagged` event: the subscriber fell behind and missed `missed` events."""

    missed: int


class CreateKeyRequest(TypedDict):
    principalId: str


class CreatedKey(TypedDict, total=False):
    key: str
    keyId: str
    workspaceId: str
    principalId: str


class KeyInfo(TypedDict, total=False):
    keyId: str
    principalId: str
    createdAtEpochMs: int


class KeyRevocation(TypedDict, total=False):
    schema: Literal["turnstile-key-revocation/v1"]
    keyId: str
    revokedAtEpochMs: int


class KeyListing(TypedDict, total=False):
    workspaceId: str
    keys: list[KeyInfo]
    revocations: list[KeyRevocation]


# A JSON object whose shape the document leaves open (`/healthz`, `/readyz`, `/openapi.json`).
JsonObject = dict[str, Any]


@dataclass(frozen=True)
class Operation:
    """One operation of the API as the client knows it.

    `request` is the TypedDict of the JSON body (None: no body). `responses` maps every status
    the client handles to the TypedDict of its JSON body (`str` for text, `None` for no
    schema). `method` is the name of the method on `Client` and `AsyncClient`. `events`, for
    a `text/event-stream` answer, maps each event name to the TypedDict of its JSON data (the
    method then returns an iterator, on `AsyncClient` an async iterator, not a coroutine).
    """

    method: str
    request: Any
    responses: dict[int, Any] = field(default_factory=dict)
    events: dict[str, Any] = field(default_factory=dict)


_ERRORS_READ = {401: ErrorBody, 403: ErrorBody, 422: ErrorBody, 429: ErrorBody, 503: ErrorBody}
_ERRORS_WRITE = {
    400: ErrorBody,
    401: ErrorBody,
    403: ErrorBody,
    408: ErrorBody,
    413: ErrorBody,
    415: ErrorBody,
    422: ErrorBody,
    429: ErrorBody,
    503: ErrorBody,
}

# Every operation of the service, keyed by (HTTP method, OpenAPI path).
OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", "/v1/workspaces"): Operation(
        "workspaces", None, {200: WorkspaceList, 401: ErrorBody, 429: ErrorBody, 503: ErrorBody}
    ),
    ("PUT", "/v1/workspaces/{workspaceId}/profiles/{profileVersion}"): Operation(
        "register_profile",
        Profile,
        {201: ProfileChangeRecord, 200: ProfileUnchanged, 409: ErrorBody, **_ERRORS_WRITE},
    ),
    ("POST", "/v1/workspaces/{workspaceId}/rollouts"): Operation(
        "start_rollout",
        RolloutStartRequest,
        {201: Rollout, 404: ErrorBody, 409: ErrorBody, **_ERRORS_WRITE},
    ),
    ("GET", "/v1/workspaces/{workspaceId}/rollouts"): Operation(
        "rollout_history", None, {200: RolloutHistory, **_ERRORS_READ}
    ),
    ("GET", "/v1/workspaces/{workspaceId}/rollouts/current"): Operation(
        "current_rollout", None, {200: Rollout, 404: ErrorBody, **_ERRORS_READ}
    ),
    ("POST", "/v1/workspaces/{workspaceId}/rollouts/current/promote"): Operation(
        "promote_rollout", RolloutEndRequest, {200: RolloutRecord, 404: ErrorBody, **_ERRORS_WRITE}
    ),
    ("POST", "/v1/workspaces/{workspaceId}/rollouts/current/abort"): Operation(
        "abort_rollout", RolloutEndRequest, {200: RolloutRecord, 404: ErrorBody, **_ERRORS_WRITE}
    ),
    ("GET", "/v1/workspaces/{workspaceId}/profiles"): Operation(
        "profile_history", None, {200: ProfileHistory, **_ERRORS_READ}
    ),
    ("GET", "/v1/workspaces/{workspaceId}/breakers"): Operation(
        "breaker_history", None, {200: BreakerHistory, **_ERRORS_READ}
    ),
    ("GET", "/v1/workspaces/{workspaceId}/pauses"): Operation(
        "pause_history", None, {200: PauseHistory, **_ERRORS_READ}
    ),
    ("GET", "/v1/workspaces/{workspaceId}/fairness"): Operation(
        "fairness", None, {200: FairnessView, 404: ErrorBody, **_ERRORS_READ}
    ),
    ("GET", "/v1/workspaces/{workspaceId}/profiles/{profileVersion}"): Operation(
        "profile_revision", None, {200: ProfileRevision, 404: ErrorBody, **_ERRORS_READ}
    ),
    ("GET", "/v1/workspaces/{workspaceId}/events"): Operation(
        "events",
        None,
        {200: FeedUpdate, 404: ErrorBody, **_ERRORS_READ},
        {"update": FeedUpdate, "lagged": FeedLagged},
    ),
    ("GET", "/v1/workspaces/{workspaceId}/snapshot"): Operation(
        "snapshot", None, {200: Snapshot, 404: ErrorBody, **_ERRORS_READ}
    ),
    ("POST", "/v1/workspaces/{workspaceId}/keys"): Operation(
        "create_key", CreateKeyRequest, {201: CreatedKey, **_ERRORS_WRITE}
    ),
    ("GET", "/v1/workspaces/{workspaceId}/keys"): Operation(
        "list_keys", None, {200: KeyListing, **_ERRORS_READ}
    ),
    ("DELETE", "/v1/workspaces/{workspaceId}/keys/{keyId}"): Operation(
        "revoke_key", None, {200: KeyRevocation, 404: ErrorBody, **_ERRORS_READ}
    ),
    ("POST", "/v1/admissions"): Operation(
        "acquire",
        AdmissionRequest,
        {
            200: LeaseBody,
            # A typed rejection, or an error of the request itself (key-busy, invalid-request,
            # forbidden, shutting-down).
            403: Union[Rejection, ErrorBody],
            409: Rejection,
            422: Union[Rejection, ErrorBody],
            429: Union[Rejection, ErrorBody],
            503: Union[Rejection, ErrorBody],
            400: ErrorBody,
            401: ErrorBody,
            404: ErrorBody,
            408: ErrorBody,
            413: ErrorBody,
            415: ErrorBody,
        },
    ),
    ("POST", "/v1/leases/{leaseId}/release"): Operation(
        "release", ReleaseRequest, {200: ReleaseResult, 404: ErrorBody, **_ERRORS_WRITE}
    ),
    ("POST", "/v1/leases/{leaseId}/heartbeat"): Operation(
        "heartbeat", None, {200: HeartbeatResult, 404: ErrorBody, **_ERRORS_READ}
    ),
    ("POST", "/v1/budgets/{budgetId}/release"): Operation(
        "release_budget", None, {200: BudgetReleaseResult, 404: ErrorBody, **_ERRORS_READ}
    ),
    ("POST", "/v1/providers/{providerId}/retry-after"): Operation(
        "pause_provider", RetryAfterRequest, {200: PauseResult, 404: ErrorBody, **_ERRORS_WRITE}
    ),
    ("GET", "/metrics"): Operation("metrics", None, {200: str}),
    ("GET", "/healthz"): Operation("healthz", None, {200: JsonObject}),
    ("GET", "/readyz"): Operation("readyz", None, {200: JsonObject, 503: JsonObject}),
    ("GET", "/openapi.json"): Operation("openapi", None, {200: JsonObject}),
}
