/**
 * Wire types: the JSON bodies of the admission API, as in `crates/server/openapi.json`.
 *
 * Every interface has a twin in `SHAPES` listing its fields; the compiler checks that each
 * shape names exactly the interface's keys (see `_ShapeChecks`), and `test/openapi.test.ts`
 * compares the shapes and `OPERATIONS` with the OpenAPI document, so a field or operation
 * the service gains or drops fails the tests.
 */

export const REASONS = [
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
] as const;
export type Reason = (typeof REASONS)[number];

export const OUTCOMES = ["success", "failure", "retry-after", "none"] as const;
export type Outcome = (typeof OUTCOMES)[number];

export const DECISIONS = ["admit", "defer", "reject"] as const;
export type Decision = (typeof DECISIONS)[number];

export const BREAKER_STATES = ["closed", "open", "half-open"] as const;
export type BreakerState = (typeof BREAKER_STATES)[number];

/**
 * Which limit holds a queued lane back (`BindingCount.binding`): a scope and a kind of limit,
 * or the provider's pause, breaker or announced quota.
 */
export const BINDINGS = [
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
] as const;
export type Binding = (typeof BINDINGS)[number];

/** How a replica coordinated a decision (replicas sharing limits through Redis only). */
export const COORDINATIONS = ["shared", "degraded"] as const;
export type Coordination = (typeof COORDINATIONS)[number];

/** Which cap refused a budget (`too-many-budgets`). */
export const BUDGET_CAPS = ["principal", "workspace"] as const;
export type BudgetCap = (typeof BUDGET_CAPS)[number];

/** What a provider lane's turns are fair in (`Limits.fairness`). */
export const FAIRNESS_MODES = ["requests", "tokens"] as const;
export type Fairness = (typeof FAIRNESS_MODES)[number];

/** The band a principal's requests wait in (`Limits.priority`), highest first. */
export const PRIORITIES = ["interactive", "standard", "batch"] as const;
export type Priority = (typeof PRIORITIES)[number];

export const CHANGE_KINDS = ["initial", "change", "rollback"] as const;
export type ChangeKind = (typeof CHANGE_KINDS)[number];
export const ROLLOUT_MODES = ["shadow", "canary"] as const;
export type RolloutMode = (typeof ROLLOUT_MODES)[number];
export const ROLLOUT_EVENTS = ["started", "promoted", "aborted"] as const;
export type RolloutEvent = (typeof ROLLOUT_EVENTS)[number];
export const PAUSE_CAUSES = ["retry-after-call", "release-outcome"] as const;
export type PauseCause = (typeof PAUSE_CAUSES)[number];

export const KEY_REVOCATION_SCHEMAS = ["turnstile-key-revocation/v1"] as const;

/** An estimate value; malformed values are answered `invalid-estimate` (422). */
export type EstimateValue = number | string | null;

/** What the call is expected to use. */
export interface Estimate {
  tokens?: EstimateValue;
  costUsd?: EstimateValue;
  requestBytes?: EstimateValue;
  items?: EstimateValue;
  attempts?: EstimateValue;
  batchSize?: EstimateValue;
  retainedWork?: EstimateValue;
}

export interface AdmissionRequest {
  providerId: string;
  budgetId: string;
  estimate: Estimate;
  /** How long the service may queue the request, relative (ms). */
  deadlineMs?: number;
}

export interface BreakerTransition {
  providerId?: string;
  from?: BreakerState;
  to?: BreakerState;
  atEpochMs?: number;
  failures?: number;
}

export interface Evidence {
  decision?: Decision;
  reason?: Reason;
  queueDelayMs?: number;
  active?: number;
  queued?: number;
  estimatedTokens?: number | null;
  estimatedCostUsd?: number | null;
  retryPressure?: number;
  breakerState?: BreakerState;
  retryAfterMs?: number;
  /** On a `deadline-unreachable` refusal only: the wait the lane predicted (= `retryAfterMs`). */
  predictedWaitMs?: number;
  /** Held by the provider's announced quota (its rate-limit headers) while it waited. */
  providerQuota?: boolean;
  breakerTransitions?: BreakerTransition[];
  budgetOpened?: boolean;
  /** On a `too-many-budgets` refusal only: which cap refused. */
  budgetCap?: BudgetCap;
  coordination?: Coordination;
  /** Only on an answer a canary rollout's candidate decided: the candidate's revision. */
  profileRevision?: string;
}

export interface LeaseBody {
  leaseId: string;
  expiresAtEpochMs: number;
  ttlMs: number;
  evidence: Evidence;
}

export interface Rejection {
  reason: Reason;
  retryable: boolean;
  evidence: Evidence;
}

export interface ErrorBody {
  error: string;
  message: string;
  field?: string;
  /** The service's bound when `field` is a number above it (`deadlineMs`, `retryAfterMs`). */
  maximum?: number;
}

/** What the call actually used: replaces the lease's estimate in the invocation's budgets. */
export interface ActualUsage {
  tokens?: number;
  costUsd?: number;
}

export interface ReleaseRequest {
  outcome: Outcome;
  retryAfterMs?: number;
  actualUsage?: ActualUsage;
}

export interface ReleaseResult {
  released: boolean;
  breakerTransitions: BreakerTransition[];
}

export interface HeartbeatResult {
  leaseId: string;
  expiresAtEpochMs: number;
}

export interface BudgetReleaseResult {
  released: boolean;
}

export interface RetryAfterRequest {
  retryAfterMs: number;
}

export interface PauseResult {
  pausedUntilEpochMs: number;
}

/** One provider lane in a snapshot (the OpenAPI document leaves this object untyped). */
export interface ProviderSnapshot {
  active: number;
  queued: number;
  breakerState: BreakerState;
  pausedUntil: number | null;
}

export interface Snapshot {
  active: number;
  queued: number;
  retryPressure: number;
  openBudgets: number;
  peakActive: number;
  peakQueued: number;
  providers: Record<string, ProviderSnapshot>;
  leases: number;
  waiters: number;
}

export interface CircuitBreakerLimits {
  failureThreshold: number;
  openMs?: number;
  halfOpenMaxCalls?: number;
}

/** A lower band's smallest share of a lane's grants while higher bands saturate it. */
export interface MinShare {
  standard?: number | null;
  batch?: number | null;
}

export interface Limits {
  concurrency: number;
  requestsPerMinute?: number;
  requestsBurst?: number;
  tokensPerSecond?: number;
  tokensBurst?: number;
  maxAttempts?: number;
  maxTokens?: number;
  maxOpenBudgets?: number;
  maxBatchSize?: number;
  maxRequestBytes?: number;
  maxItems?: number;
  maxRetainedWork?: number;
  maxQueueLength?: number;
  maxQueueWaitMs?: number;
  reservedConcurrency?: number;
  maxCostUsd?: number;
  allowUnknownCost?: boolean;
  maxPrincipalShare?: number;
  circuitBreaker?: CircuitBreakerLimits;
  /** Provider scope only: `requests` (absent) or `tokens`. */
  fairness?: Fairness | null;
  /** Principal scope only: within [0.01, 100], default 1. */
  weight?: number | null;
  /** Principal scope only: default `standard`. */
  priority?: Priority | null;
  /** Workspace scope only: defaults standard 0.2, batch 0.1. */
  minShare?: MinShare | null;
}

export interface Profile {
  workspace: Limits;
  providers: Record<string, Limits>;
  principals?: Record<string, Limits>;
  /** Request only (`registerProfile`): the approval on record, not part of the revision. */
  note?: string | null;
  /** Request only (`registerProfile`): who approved the change. */
  approvedBy?: string | null;
}

export interface ProfileChangeRecord {
  schema: string;
  workspaceId: string;
  kind: ChangeKind;
  previousProfileVersion: string | null;
  profileVersion: string;
  digest: string;
  atEpochMs: number;
  /** The keyId of the admin key that made the change (null: first start, or an older record). */
  actorKeyId: string | null;
  /** The operator's note on the change (null: none given, or an older record). */
  note: string | null;
  /** Who approved the change (null: none given, or an older record). */
  approvedBy: string | null;
}

export interface ProfileUnchanged {
  unchanged: boolean;
  profileVersion: string;
}

export interface ProfileHistory {
  records: ProfileChangeRecord[];
}

export interface BreakerHistory {
  records: BreakerTransition[];
}

/** `GET …/profiles/{profileVersion}` (admin): a revision's limits as first registered. */
export interface ProfileRevision {
  workspaceId: string;
  profileVersion: string;
  digest: string;
  registeredAtEpochMs: number;
  profile: Profile;
}

/** A Retry-After pause of a provider lane (`turnstile-provider-pause/v1`, audit log). */
export interface PauseRecord {
  schema: string;
  providerId: string;
  retryAfterMs: number;
  untilEpochMs: number;
  atEpochMs: number;
  cause: PauseCause;
}

export interface PauseHistory {
  records: PauseRecord[];
}

export interface PrincipalShare {
  principalId: string;
  grants: number;
  share: number;
  meanQueueDelayMs: number;
  /** Tokens served in the window: per grant, the usage its release reported, else its estimate. */
  tokens: number;
  tokenShare: number;
  /** From the profile in force (null: the profile no longer names the principal). */
  weight: number | null;
  priority: Priority | null;
}

export interface MinuteGrants {
  startEpochMs: number;
  grants: number;
  queueDelayMs: number;
  tokens: number;
}

/** A provider lane of the profile in force and what its turns are fair in. */
export interface ProviderFairness {
  providerId: string;
  fairness: Fairness;
}

/** One workspace a key may see and its current revision (null: no profile yet). */
export interface WorkspaceEntry {
  workspaceId: string;
  profileVersion: string | null;
}

/** `GET /v1/workspaces`: an admin key sees every workspace with a profile, a principal key its own. */
export interface WorkspaceList {
  workspaces: WorkspaceEntry[];
}

/**
 * `GET …/fairness`: grants and tokens served per principal over the last five minutes
 * (server-side window), with weights, bands and each lane's fairness mode.
 */
export interface FairnessView {
  atEpochMs: number;
  fromEpochMs: number;
  bucketMs: number;
  totalGrants: number;
  meanQueueDelayMs: number;
  unattributedGrants: number;
  principals: PrincipalShare[];
  minutes: MinuteGrants[];
  totalTokens: number;
  unattributedTokens: number;
  providers: ProviderFairness[];
}

// The live event feed (`GET …/events`, server-sent events): the JSON of an `update` event is a
// `FeedUpdate`, of a `lagged` event a `FeedLagged` (`events.ts` reads the stream).

/** A token bucket of a lane: tokens available now, and its capacity (the burst). */
export interface LaneBucket {
  available: number;
  capacity: number;
}

/** How many of a provider's queued lanes (one per principal with waiters) a limit holds. */
export interface BindingCount {
  binding: Binding;
  lanes: number;
}

/** One provider lane as the console shows it (`LaneView` in the OpenAPI document). */
export interface LaneView {
  providerId: string;
  active: number;
  /** null: the lane has no concurrency limit. */
  concurrency: number | null;
  queued: number;
  oldestWaitMs: number | null;
  /** null: the lane has no requests-per-minute limit. */
  requests: LaneBucket | null;
  /** null: the lane has no tokens-per-second limit. */
  tokens: LaneBucket | null;
  breakerState: BreakerState;
  /** While open: epoch ms of the next probe. */
  nextProbeAt: number | null;
  /** While paused: epoch ms the pause ends. */
  pausedUntil: number | null;
  /** Which limits hold the queued lanes, most lanes first (empty when nothing waits). */
  bindings: BindingCount[];
}

/** Final admission answers of one provider lane with one reason (`admitted` or a refusal). */
export interface DecisionCount {
  providerId: string;
  reason: Reason;
  count: number;
}

/** Grants of one principal and the queue delay they waited, summed (admin keys only). */
export interface PrincipalTally {
  principalId: string;
  grants: number;
  queueDelayMs: number;
}

/** A Retry-After pause as the feed reports it (a `PauseRecord` without `schema`). */
export interface FeedPause {
  providerId: string;
  retryAfterMs: number;
  untilEpochMs: number;
  atEpochMs: number;
  cause: PauseCause;
}

/** A profile change as the feed reports it (the core's record: no `actorKeyId`). */
export interface FeedProfileChange {
  schema: string;
  workspaceId: string;
  kind: ChangeKind;
  previousProfileVersion: string | null;
  profileVersion: string;
  digest: string;
  atEpochMs: number;
}

/** The JSON of an `update` event: the lanes at `atEpochMs`, and what happened in `(sinceEpochMs, atEpochMs]`. */
export interface FeedUpdate {
  atEpochMs: number;
  sinceEpochMs: number;
  lanes: LaneView[];
  decisions: DecisionCount[];
  /** Admin keys only (absent or empty for a principal key). */
  principals?: PrincipalTally[];
  transitions: BreakerTransition[];
  pauses: FeedPause[];
  profileChange?: FeedProfileChange;
  /** Transitions and pauses left out of this event (more than 64 in one flush). */
  dropped: number;
}

/** The JSON of a `lagged` event: the subscriber fell behind and missed `missed` events. */
export interface FeedLagged {
  missed: number;
}

export interface CreateKeyRequest {
  principalId: string;
}

export interface CreatedKey {
  /** Shown once; only its hash is stored. */
  key: string;
  keyId: string;
  workspaceId: string;
  principalId: string;
}

export interface KeyInfo {
  keyId: string;
  principalId: string;
  createdAtEpochMs: number;
}

export interface KeyRevocation {
  schema: (typeof KEY_REVOCATION_SCHEMAS)[number];
  keyId: string;
  revokedAtEpochMs: number;
}

export interface KeyListing {
  workspaceId: string;
  keys: KeyInfo[];
  revocations: KeyRevocation[];
}

export interface CandidateOnly {
  admit: number;
  queue: number;
  refuse: number;
}

/** A rollout's decision comparison: counts only, never a principal or workspace. */
export interface RolloutDecisions {
  compared: number;
  agree: number;
  differ: number;
  /** Differing arrivals by the candidate's reason (`admitted` for an admit). */
  byReason: Record<string, number>;
  candidateOnly: CandidateOnly;
}

/** The running rollout (`startRollout`, `currentRollout`). */
export interface Rollout {
  workspaceId: string;
  revision: string;
  digest: string;
  mode: RolloutMode;
  canaryShare: number | null;
  startedAtEpochMs: number;
  decisions: RolloutDecisions;
}

/** A rollout's audit record (`turnstile-rollout/v1`): started, promoted or aborted. */
export interface RolloutRecord {
  schema: string;
  event: RolloutEvent;
  revision: string;
  digest: string;
  mode: RolloutMode;
  canaryShare: number | null;
  startedAtEpochMs: number;
  endedAtEpochMs: number | null;
  decisions: RolloutDecisions | null;
  atEpochMs: number;
  actorKeyId: string | null;
  note: string | null;
  approvedBy: string | null;
}

export interface RolloutHistory {
  records: RolloutRecord[];
}

export interface RolloutStartRequest {
  revision: string;
  profile: Profile;
  mode: RolloutMode;
  canaryShare?: number;
  note?: string | null;
  approvedBy?: string | null;
}

export interface RolloutEndRequest {
  note?: string | null;
  approvedBy?: string | null;
}

/** A JSON object whose shape the document leaves open (`/healthz`, `/readyz`, `/openapi.json`). */
export type JsonObject = Record<string, unknown>;

/**
 * The fields of each wire type. A field's kind is `scalar`, `enum:<Name>` (a list in
 * `ENUMS`), `const` (a constant string), `<Shape>` (a nested object), `<Shape>[]` (an array
 * of it), `{<Shape>}` (a map of it) or `object` (an object the document leaves open).
 */
export const SHAPES = {
  Estimate: {
    tokens: "scalar",
    costUsd: "scalar",
    requestBytes: "scalar",
    items: "scalar",
    attempts: "scalar",
    batchSize: "scalar",
    retainedWork: "scalar",
  },
  AdmissionRequest: { providerId: "scalar", budgetId: "scalar", estimate: "Estimate", deadlineMs: "scalar" },
  BreakerTransition: {
    providerId: "scalar",
    from: "enum:BreakerState",
    to: "enum:BreakerState",
    atEpochMs: "scalar",
    failures: "scalar",
  },
  Evidence: {
    decision: "enum:Decision",
    reason: "enum:Reason",
    queueDelayMs: "scalar",
    active: "scalar",
    queued: "scalar",
    estimatedTokens: "scalar",
    estimatedCostUsd: "scalar",
    retryPressure: "scalar",
    breakerState: "enum:BreakerState",
    retryAfterMs: "scalar",
    predictedWaitMs: "scalar",
    providerQuota: "scalar",
    breakerTransitions: "BreakerTransition[]",
    budgetOpened: "scalar",
    budgetCap: "enum:BudgetCap",
    coordination: "enum:Coordination",
    profileRevision: "scalar",
  },
  LeaseBody: { leaseId: "scalar", expiresAtEpochMs: "scalar", ttlMs: "scalar", evidence: "Evidence" },
  Rejection: { reason: "enum:Reason", retryable: "scalar", evidence: "Evidence" },
  ErrorBody: { error: "scalar", message: "scalar", field: "scalar", maximum: "scalar" },
  ActualUsage: { tokens: "scalar", costUsd: "scalar" },
  ReleaseRequest: { outcome: "enum:Outcome", retryAfterMs: "scalar", actualUsage: "ActualUsage" },
  ReleaseResult: { released: "scalar", breakerTransitions: "BreakerTransition[]" },
  HeartbeatResult: { leaseId: "scalar", expiresAtEpochMs: "scalar" },
  BudgetReleaseResult: { released: "scalar" },
  RetryAfterRequest: { retryAfterMs: "scalar" },
  PauseResult: { pausedUntilEpochMs: "scalar" },
  ProviderSnapshot: { active: "scalar", queued: "scalar", breakerState: "enum:BreakerState", pausedUntil: "scalar" },
  Snapshot: {
    active: "scalar",
    queued: "scalar",
    retryPressure: "scalar",
    openBudgets: "scalar",
    peakActive: "scalar",
    peakQueued: "scalar",
    providers: "{ProviderSnapshot}",
    leases: "scalar",
    waiters: "scalar",
  },
  CircuitBreakerLimits: { failureThreshold: "scalar", openMs: "scalar", halfOpenMaxCalls: "scalar" },
  MinShare: { standard: "scalar", batch: "scalar" },
  Limits: {
    concurrency: "scalar",
    requestsPerMinute: "scalar",
    requestsBurst: "scalar",
    tokensPerSecond: "scalar",
    tokensBurst: "scalar",
    maxAttempts: "scalar",
    maxTokens: "scalar",
    maxOpenBudgets: "scalar",
    maxBatchSize: "scalar",
    maxRequestBytes: "scalar",
    maxItems: "scalar",
    maxRetainedWork: "scalar",
    maxQueueLength: "scalar",
    maxQueueWaitMs: "scalar",
    reservedConcurrency: "scalar",
    maxCostUsd: "scalar",
    allowUnknownCost: "scalar",
    maxPrincipalShare: "scalar",
    circuitBreaker: "CircuitBreakerLimits",
    fairness: "enum:Fairness",
    weight: "scalar",
    priority: "enum:Priority",
    minShare: "MinShare",
  },
  Profile: {
    workspace: "Limits",
    providers: "{Limits}",
    principals: "{Limits}",
    note: "scalar",
    approvedBy: "scalar",
  },
  ProfileChangeRecord: {
    schema: "const",
    workspaceId: "scalar",
    kind: "enum:ChangeKind",
    previousProfileVersion: "scalar",
    profileVersion: "scalar",
    digest: "scalar",
    atEpochMs: "scalar",
    actorKeyId: "scalar",
    note: "scalar",
    approvedBy: "scalar",
  },
  ProfileUnchanged: { unchanged: "scalar", profileVersion: "scalar" },
  ProfileHistory: { records: "ProfileChangeRecord[]" },
  BreakerHistory: { records: "BreakerTransition[]" },
  ProfileRevision: {
    workspaceId: "scalar",
    profileVersion: "scalar",
    digest: "scalar",
    registeredAtEpochMs: "scalar",
    profile: "Profile",
  },
  PauseRecord: {
    schema: "const",
    providerId: "scalar",
    retryAfterMs: "scalar",
    untilEpochMs: "scalar",
    atEpochMs: "scalar",
    cause: "enum:PauseCause",
  },
  PauseHistory: { records: "PauseRecord[]" },
  PrincipalShare: {
    principalId: "scalar",
    grants: "scalar",
    share: "scalar",
    meanQueueDelayMs: "scalar",
    tokens: "scalar",
    tokenShare: "scalar",
    weight: "scalar",
    priority: "enum:Priority",
  },
  MinuteGrants: { startEpochMs: "scalar", grants: "scalar", queueDelayMs: "scalar", tokens: "scalar" },
  ProviderFairness: { providerId: "scalar", fairness: "enum:Fairness" },
  WorkspaceEntry: { workspaceId: "scalar", profileVersion: "scalar" },
  WorkspaceList: { workspaces: "WorkspaceEntry[]" },
  FairnessView: {
    atEpochMs: "scalar",
    fromEpochMs: "scalar",
    bucketMs: "scalar",
    totalGrants: "scalar",
    meanQueueDelayMs: "scalar",
    unattributedGrants: "scalar",
    principals: "PrincipalShare[]",
    minutes: "MinuteGrants[]",
    totalTokens: "scalar",
    unattributedTokens: "scalar",
    providers: "ProviderFairness[]",
  },
  LaneBucket: { available: "scalar", capacity: "scalar" },
  LaneView: {
    providerId: "scalar",
    active: "scalar",
    concurrency: "scalar",
    queued: "scalar",
    oldestWaitMs: "scalar",
    requests: "LaneBucket",
    tokens: "LaneBucket",
    breakerState: "enum:BreakerState",
    nextProbeAt: "scalar",
    pausedUntil: "scalar",
    bindings: "BindingCount[]",
  },
  BindingCount: { binding: "enum:Binding", lanes: "scalar" },
  DecisionCount: { providerId: "scalar", reason: "enum:Reason", count: "scalar" },
  PrincipalTally: { principalId: "scalar", grants: "scalar", queueDelayMs: "scalar" },
  FeedPause: {
    providerId: "scalar",
    retryAfterMs: "scalar",
    untilEpochMs: "scalar",
    atEpochMs: "scalar",
    cause: "enum:PauseCause",
  },
  FeedProfileChange: {
    schema: "const",
    workspaceId: "scalar",
    kind: "enum:ChangeKind",
    previousProfileVersion: "scalar",
    profileVersion: "scalar",
    digest: "scalar",
    atEpochMs: "scalar",
  },
  FeedUpdate: {
    atEpochMs: "scalar",
    sinceEpochMs: "scalar",
    lanes: "LaneView[]",
    decisions: "DecisionCount[]",
    principals: "PrincipalTally[]",
    transitions: "BreakerTransition[]",
    pauses: "FeedPause[]",
    profileChange: "FeedProfileChange",
    dropped: "scalar",
  },
  FeedLagged: { missed: "scalar" },
  CreateKeyRequest: { principalId: "scalar" },
  CreatedKey: { key: "scalar", keyId: "scalar", workspaceId: "scalar", principalId: "scalar" },
  KeyInfo: { keyId: "scalar", principalId: "scalar", createdAtEpochMs: "scalar" },
  KeyRevocation: { schema: "enum:KeyRevocationSchema", keyId: "scalar", revokedAtEpochMs: "scalar" },
  KeyListing: { workspaceId: "scalar", keys: "KeyInfo[]", revocations: "KeyRevocation[]" },
  CandidateOnly: { admit: "scalar", queue: "scalar", refuse: "scalar" },
  RolloutDecisions: {
    compared: "scalar",
    agree: "scalar",
    differ: "scalar",
    byReason: "{scalar}",
    candidateOnly: "CandidateOnly",
  },
  Rollout: {
    workspaceId: "scalar",
    revision: "scalar",
    digest: "scalar",
    mode: "enum:RolloutMode",
    canaryShare: "scalar",
    startedAtEpochMs: "scalar",
    decisions: "RolloutDecisions",
  },
  RolloutRecord: {
    schema: "const",
    event: "enum:RolloutEvent",
    revision: "scalar",
    digest: "scalar",
    mode: "enum:RolloutMode",
    canaryShare: "scalar",
    startedAtEpochMs: "scalar",
    endedAtEpochMs: "scalar",
    decisions: "RolloutDecisions",
    atEpochMs: "scalar",
    actorKeyId: "scalar",
    note: "scalar",
    approvedBy: "scalar",
  },
  RolloutHistory: { records: "RolloutRecord[]" },
  RolloutStartRequest: {
    revision: "scalar",
    profile: "Profile",
    mode: "enum:RolloutMode",
    canaryShare: "scalar",
    note: "scalar",
    approvedBy: "scalar",
  },
  RolloutEndRequest: { note: "scalar", approvedBy: "scalar" },
} as const satisfies Record<string, Record<string, string>>;

export type ShapeName = keyof typeof SHAPES;

/** The required fields of each request body (the document's `required`). */
export const REQUIRED = {
  AdmissionRequest: ["providerId", "budgetId", "estimate"],
  ReleaseRequest: ["outcome"],
  RetryAfterRequest: ["retryAfterMs"],
  CreateKeyRequest: ["principalId"],
  Profile: ["workspace", "providers"],
  RolloutStartRequest: ["revision", "profile", "mode"],
  RolloutEndRequest: [],
} as const satisfies Partial<Record<ShapeName, readonly string[]>>;

export const ENUMS: Record<string, readonly string[]> = {
  Reason: REASONS,
  Outcome: OUTCOMES,
  Decision: DECISIONS,
  BreakerState: BREAKER_STATES,
  Binding: BINDINGS,
  Coordination: COORDINATIONS,
  ChangeKind: CHANGE_KINDS,
  BudgetCap: BUDGET_CAPS,
  RolloutMode: ROLLOUT_MODES,
  RolloutEvent: ROLLOUT_EVENTS,
  PauseCause: PAUSE_CAUSES,
  Fairness: FAIRNESS_MODES,
  Priority: PRIORITIES,
  KeyRevocationSchema: KEY_REVOCATION_SCHEMAS,
};

/** A body shape, "A|B" when an answer may be either (a typed rejection or an error of the request). */
export type BodyKind = ShapeName | "text" | "object" | "Rejection|ErrorBody";

export interface OperationInfo {
  /** The method of `Client` that calls it. */
  method: string;
  request: ShapeName | null;
  responses: Record<number, BodyKind>;
  /** A `text/event-stream` answer: the shape of each event's JSON data, by event name. */
  events?: Record<string, ShapeName>;
}

const errorsRead = { 401: "ErrorBody", 403: "ErrorBody", 422: "ErrorBody", 429: "ErrorBody", 503: "ErrorBody" } as const;
const errorsWrite = { 400: "ErrorBody", 408: "ErrorBody", 413: "ErrorBody", 415: "ErrorBody", ...errorsRead } as const;

/** Every operation of the service, keyed by `"METHOD /path"` as in the OpenAPI document. */
export const OPERATIONS: Record<string, OperationInfo> = {
  "GET /v1/workspaces": {
    method: "workspaces",
    request: null,
    responses: { 200: "WorkspaceList", 401: "ErrorBody", 429: "ErrorBody", 503: "ErrorBody" },
  },
  "PUT /v1/workspaces/{workspaceId}/profiles/{profileVersion}": {
    method: "registerProfile",
    request: "Profile",
    responses: { 201: "ProfileChangeRecord", 200: "ProfileUnchanged", 409: "ErrorBody", ...errorsWrite },
  },
  "POST /v1/workspaces/{workspaceId}/rollouts": {
    method: "startRollout",
    request: "RolloutStartRequest",
    responses: { 201: "Rollout", 404: "ErrorBody", 409: "ErrorBody", ...errorsWrite },
  },
  "GET /v1/workspaces/{workspaceId}/rollouts": {
    method: "rolloutHistory",
    request: null,
    responses: { 200: "RolloutHistory", ...errorsRead },
  },
  "GET /v1/workspaces/{workspaceId}/rollouts/current": {
    method: "currentRollout",
    request: null,
    responses: { 200: "Rollout", 404: "ErrorBody", ...errorsRead },
  },
  "POST /v1/workspaces/{workspaceId}/rollouts/current/promote": {
    method: "promoteRollout",
    request: "RolloutEndRequest",
    responses: { 200: "RolloutRecord", 404: "ErrorBody", ...errorsWrite },
  },
  "POST /v1/workspaces/{workspaceId}/rollouts/current/abort": {
    method: "abortRollout",
    request: "RolloutEndRequest",
    responses: { 200: "RolloutRecord", 404: "ErrorBody", ...errorsWrite },
  },
  "GET /v1/workspaces/{workspaceId}/profiles": {
    method: "profileHistory",
    request: null,
    responses: { 200: "ProfileHistory", ...errorsRead },
  },
  "GET /v1/workspaces/{workspaceId}/breakers": {
    method: "breakerHistory",
    request: null,
    responses: { 200: "BreakerHistory", ...errorsRead },
  },
  "GET /v1/workspaces/{workspaceId}/pauses": {
    method: "pauseHistory",
    request: null,
    responses: { 200: "PauseHistory", ...errorsRead },
  },
  "GET /v1/workspaces/{workspaceId}/fairness": {
    method: "fairness",
    request: null,
    responses: { 200: "FairnessView", 404: "ErrorBody", ...errorsRead },
  },
  "GET /v1/workspaces/{workspaceId}/profiles/{profileVersion}": {
    method: "profileRevision",
    request: null,
    responses: { 200: "ProfileRevision", 404: "ErrorBody", ...errorsRead },
  },
  "GET /v1/workspaces/{workspaceId}/events": {
    method: "events",
    request: null,
    responses: { 200: "FeedUpdate", 404: "ErrorBody", ...errorsRead },
    events: { update: "FeedUpdate", lagged: "FeedLagged" },
  },
  "GET /v1/workspaces/{workspaceId}/snapshot": {
    method: "snapshot",
    request: null,
    responses: { 200: "Snapshot", 404: "ErrorBody", ...errorsRead },
  },
  "POST /v1/workspaces/{workspaceId}/keys": {
    method: "createKey",
    request: "CreateKeyRequest",
    responses: { 201: "CreatedKey", ...errorsWrite },
  },
  "GET /v1/workspaces/{workspaceId}/keys": {
    method: "listKeys",
    request: null,
    responses: { 200: "KeyListing", ...errorsRead },
  },
  "DELETE /v1/workspaces/{workspaceId}/keys/{keyId}": {
    method: "revokeKey",
    request: null,
    responses: { 200: "KeyRevocation", 404: "ErrorBody", ...errorsRead },
  },
  "POST /v1/admissions": {
    method: "acquire",
    request: "AdmissionRequest",
    responses: {
      200: "LeaseBody",
      // A typed rejection, or an error of the request itself (key-busy, invalid-request,
      // forbidden, shutting-down).
      403: "Rejection|ErrorBody",
      409: "Rejection",
      422: "Rejection|ErrorBody",
      429: "Rejection|ErrorBody",
      503: "Rejection|ErrorBody",
      400: "ErrorBody",
      401: "ErrorBody",
      404: "ErrorBody",
      408: "ErrorBody",
      413: "ErrorBody",
      415: "ErrorBody",
    },
  },
  "POST /v1/leases/{leaseId}/release": {
    method: "release",
    request: "ReleaseRequest",
    responses: { 200: "ReleaseResult", 404: "ErrorBody", ...errorsWrite },
  },
  "POST /v1/leases/{leaseId}/heartbeat": {
    method: "heartbeat",
    request: null,
    responses: { 200: "HeartbeatResult", 404: "ErrorBody", ...errorsRead },
  },
  "POST /v1/budgets/{budgetId}/release": {
    method: "releaseBudget",
    request: null,
    responses: { 200: "BudgetReleaseResult", 404: "ErrorBody", ...errorsRead },
  },
  "POST /v1/providers/{providerId}/retry-after": {
    method: "pauseProvider",
    request: "RetryAfterRequest",
    responses: { 200: "PauseResult", 404: "ErrorBody", ...errorsWrite },
  },
  "GET /metrics": { method: "metrics", request: null, responses: { 200: "text" } },
  "GET /healthz": { method: "healthz", request: null, responses: { 200: "object" } },
  "GET /readyz": { method: "readyz", request: null, responses: { 200: "object", 503: "object" } },
  "GET /openapi.json": { method: "openapi", request: null, responses: { 200: "object" } },
};

// Compile-time: each shape lists exactly the keys of its interface.
type SameKeys<A, B> = [Exclude<keyof A, keyof B>, Exclude<keyof B, keyof A>] extends [never, never] ? true : false;
type Assert<T extends true> = T;
export type _ShapeChecks = [
  Assert<SameKeys<Estimate, typeof SHAPES.Estimate>>,
  Assert<SameKeys<AdmissionRequest, typeof SHAPES.AdmissionRequest>>,
  Assert<SameKeys<BreakerTransition, typeof SHAPES.BreakerTransition>>,
  Assert<SameKeys<Evidence, typeof SHAPES.Evidence>>,
  Assert<SameKeys<LeaseBody, typeof SHAPES.LeaseBody>>,
  Assert<SameKeys<Rejection, typeof SHAPES.Rejection>>,
  Assert<SameKeys<ErrorBody, typeof SHAPES.ErrorBody>>,
  Assert<SameKeys<ActualUsage, typeof SHAPES.ActualUsage>>,
  Assert<SameKeys<ReleaseRequest, typeof SHAPES.ReleaseRequest>>,
  Assert<SameKeys<ReleaseResult, typeof SHAPES.ReleaseResult>>,
  Assert<SameKeys<HeartbeatResult, typeof SHAPES.HeartbeatResult>>,
  Assert<SameKeys<BudgetReleaseResult, typeof SHAPES.BudgetReleaseResult>>,
  Assert<SameKeys<RetryAfterRequest, typeof SHAPES.RetryAfterRequest>>,
  Assert<SameKeys<PauseResult, typeof SHAPES.PauseResult>>,
  Assert<SameKeys<ProviderSnapshot, typeof SHAPES.ProviderSnapshot>>,
  Assert<SameKeys<Snapshot, typeof SHAPES.Snapshot>>,
  Assert<SameKeys<CircuitBreakerLimits, typeof SHAPES.CircuitBreakerLimits>>,
  Assert<SameKeys<MinShare, typeof SHAPES.MinShare>>,
  Assert<SameKeys<Limits, typeof SHAPES.Limits>>,
  Assert<SameKeys<Profile, typeof SHAPES.Profile>>,
  Assert<SameKeys<ProfileChangeRecord, typeof SHAPES.ProfileChangeRecord>>,
  Assert<SameKeys<CandidateOnly, typeof SHAPES.CandidateOnly>>,
  Assert<SameKeys<RolloutDecisions, typeof SHAPES.RolloutDecisions>>,
  Assert<SameKeys<Rollout, typeof SHAPES.Rollout>>,
  Assert<SameKeys<RolloutRecord, typeof SHAPES.RolloutRecord>>,
  Assert<SameKeys<RolloutHistory, typeof SHAPES.RolloutHistory>>,
  Assert<SameKeys<RolloutStartRequest, typeof SHAPES.RolloutStartRequest>>,
  Assert<SameKeys<RolloutEndRequest, typeof SHAPES.RolloutEndRequest>>,
  Assert<SameKeys<ProfileUnchanged, typeof SHAPES.ProfileUnchanged>>,
  Assert<SameKeys<ProfileHistory, typeof SHAPES.ProfileHistory>>,
  Assert<SameKeys<BreakerHistory, typeof SHAPES.BreakerHistory>>,
  Assert<SameKeys<ProfileRevision, typeof SHAPES.ProfileRevision>>,
  Assert<SameKeys<PauseRecord, typeof SHAPES.PauseRecord>>,
  Assert<SameKeys<PauseHistory, typeof SHAPES.PauseHistory>>,
  Assert<SameKeys<PrincipalShare, typeof SHAPES.PrincipalShare>>,
  Assert<SameKeys<MinuteGrants, typeof SHAPES.MinuteGrants>>,
  Assert<SameKeys<ProviderFairness, typeof SHAPES.ProviderFairness>>,
  Assert<SameKeys<FairnessView, typeof SHAPES.FairnessView>>,
  Assert<SameKeys<WorkspaceEntry, typeof SHAPES.WorkspaceEntry>>,
  Assert<SameKeys<WorkspaceList, typeof SHAPES.WorkspaceList>>,
  Assert<SameKeys<LaneBucket, typeof SHAPES.LaneBucket>>,
  Assert<SameKeys<LaneView, typeof SHAPES.LaneView>>,
  Assert<SameKeys<BindingCount, typeof SHAPES.BindingCount>>,
  Assert<SameKeys<DecisionCount, typeof SHAPES.DecisionCount>>,
  Assert<SameKeys<PrincipalTally, typeof SHAPES.PrincipalTally>>,
  Assert<SameKeys<FeedPause, typeof SHAPES.FeedPause>>,
  Assert<SameKeys<FeedProfileChange, typeof SHAPES.FeedProfileChange>>,
  Assert<SameKeys<FeedUpdate, typeof SHAPES.FeedUpdate>>,
  Assert<SameKeys<FeedLagged, typeof SHAPES.FeedLagged>>,
  Assert<SameKeys<CreateKeyRequest, typeof SHAPES.CreateKeyRequest>>,
  Assert<SameKeys<CreatedKey, typeof SHAPES.CreatedKey>>,
  Assert<SameKeys<KeyInfo, typeof SHAPES.KeyInfo>>,
  Assert<SameKeys<KeyRevocation, typeof SHAPES.KeyRevocation>>,
  Assert<SameKeys<KeyListing, typeof SHAPES.KeyListing>>,
];
