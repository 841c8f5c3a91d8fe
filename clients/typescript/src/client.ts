import {
  ApiError,
  BadRequestError,
  LeaseLostError,
  RefusedError,
  TurnstileError,
  UnavailableError,
  errorFromResponse,
  outcomeFor,
  retryAfterFromHeaders,
} from "./errors.js";
import { type FeedEvent, SseParser, checkMaxEvents, decodeEvent } from "./events.js";
import type {
  ActualUsage,
  AdmissionRequest,
  BreakerHistory,
  BudgetReleaseResult,
  FairnessView,
  CreatedKey,
  CreateKeyRequest,
  Estimate,
  Evidence,
  HeartbeatResult,
  JsonObject,
  KeyListing,
  KeyRevocation,
  LeaseBody,
  Outcome,
  PauseHistory,
  PauseResult,
  Profile,
  ProfileChangeRecord,
  ProfileHistory,
  ProfileRevision,
  ProfileUnchanged,
  Reason,
  ReleaseRequest,
  ReleaseResult,
  RetryAfterRequest,
  Rollout,
  RolloutEndRequest,
  RolloutHistory,
  RolloutMode,
  RolloutRecord,
  RolloutStartRequest,
  Snapshot,
  WorkspaceList,
} from "./types.js";
import { OUTCOMES } from "./types.js";

/** The service's largest `deadlineMs` by default (`admission.max_wait_ms`). */
const DEFAULT_MAX_WAIT_MS = 300_000;
const REJECTION_STATUSES = new Set([403, 409, 422, 429, 503]);

export interface ClientOptions {
  /** e.g. `http://127.0.0.1:8686` */
  baseUrl: string;
  /** A principal key (`tsk_…`) for admissions, or the admin key (`tsa_…`). */
  key: string;
  /** Bounds every request (ms, default 10000); an admission adds how long it may wait. */
  timeoutMs?: number;
  /** Heartbeat interval as a fraction of the lease's `ttlMs` (default 1/3). */
  heartbeatFraction?: number;
  /** A `fetch` implementation (default: the global one). */
  fetch?: typeof fetch;
}

export interface AdmissionOptions {
  providerId: string;
  /** The invocation budget this attempt is charged to. */
  budgetId: string;
  estimate?: Estimate;
  /** How long the service may queue the request (`deadlineMs`); default: the service's
   * `admission.default_wait_ms`. 0: only if free now. */
  waitMs?: number;
  /** Heartbeat automatically (default true). */
  heartbeat?: boolean;
  /** Aborting it while waiting for admission removes the request from the service's queue. */
  signal?: AbortSignal;
}

export interface EventsOptions {
  /** End the stream after this many events (1..100000); default: no limit. */
  maxEvents?: number;
  /** Aborting it closes the connection; a pending or later `next()` rejects with its reason. */
  signal?: AbortSignal;
}

/** The approval on record of a revision change: kept with it in the audit log. */
export interface Approval {
  /** The operator's note (1 to 1000 characters). */
  note?: string;
  /** Who approved the change (1 to 128 characters, no control character). */
  approvedBy?: string;
}

export interface ReleaseOptions {
  outcome?: Outcome;
  /** Required with outcome `retry-after`, refused otherwise. */
  retryAfterMs?: number;
  actualUsage?: ActualUsage;
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

interface Call {
  method: string;
  path: string;
  body?: unknown;
  timeoutMs?: number;
  signal?: AbortSignal | undefined;
}

function seg(value: string): string {
  if (typeof value !== "string" || value === "") throw new TypeError("an ID must be a non-empty string");
  return encodeURIComponent(value);
}

function checkMs(name: string, value: number | undefined): void {
  if (value === undefined) return;
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${name} must be an integer >= 0 (ms)`);
}

function checkUsage(usage: ActualUsage): ActualUsage {
  const out: ActualUsage = {};
  if (usage.tokens !== undefined) {
    if (!Number.isSafeInteger(usage.tokens) || usage.tokens < 0) throw new RangeError("tokens must be an integer >= 0");
    out.tokens = usage.tokens;
  }
  if (usage.costUsd !== undefined) {
    if (!Number.isFinite(usage.costUsd) || usage.costUsd < 0) throw new RangeError("costUsd must be a finite number >= 0");
    out.costUsd = usage.costUsd;
  }
  return out;
}

/** The fields of `approval` that were given (the service checks them: 422 naming the field). */
function withApproval(approval: Approval): Approval {
  const out: Approval = {};
  if (approval.note !== undefined) out.note = approval.note;
  if (approval.approvedBy !== undefined) out.approvedBy = approval.approvedBy;
  return out;
}

function releaseBody(options: ReleaseOptions): ReleaseRequest {
  const outcome = options.outcome ?? "success";
  if (!(OUTCOMES as readonly string[]).includes(outcome)) throw new RangeError(`outcome must be one of ${OUTCOMES.join(", ")}`);
  const body: ReleaseRequest = { outcome };
  if (outcome === "retry-after") {
    if (options.retryAfterMs === undefined) throw new RangeError("outcome retry-after needs retryAfterMs");
    checkMs("retryAfterMs", options.retryAfterMs);
    body.retryAfterMs = options.retryAfterMs;
  } else if (options.retryAfterMs !== undefined) {
    throw new RangeError("retryAfterMs is only allowed with outcome retry-after");
  }
  if (options.actualUsage !== undefined) {
    const usage = checkUsage(options.actualUsage);
    if (Object.keys(usage).length > 0) body.actualUsage = usage;
  }
  return body;
}

/**
 * A granted lease. Heartbeats run on an unref'd timer until it is released.
 *
 * Inside `withAdmission` it is released for you when the callback settles, never throwing:
 * a failed release is kept in `releaseError`. `release()` called directly throws.
 */
export class Lease {
  readonly leaseId: string;
  readonly ttlMs: number;
  readonly evidence: Evidence;
  expiresAtEpochMs: number;
  /** True once the service acknowledged the release. */
  released = false;
  /** True once the service said the lease is gone (404 on heartbeat or release). */
  lost = false;
  /** Why the automatic release at the end of `withAdmission` failed. */
  releaseError: unknown = undefined;
  releaseResult: ReleaseResult | undefined = undefined;
  /** Heartbeats acknowledged by the service. */
  heartbeats = 0;
  #client: Client;
  #usage: ActualUsage = {};
  #timer: ReturnType<typeof setInterval> | undefined;
  #inflight: Promise<unknown> | undefined;
  #stopping = false;
  #release: Promise<ReleaseResult> | undefined;

  /** @internal */
  constructor(
    client: Client,
    body: LeaseBody,
    readonly providerId: string,
    readonly budgetId: string,
    heartbeat: boolean,
    fraction: number,
  ) {
    this.#client = client;
    this.leaseId = body.leaseId;
    this.ttlMs = body.ttlMs;
    this.expiresAtEpochMs = body.expiresAtEpochMs;
    this.evidence = body.evidence ?? {};
    if (heartbeat) {
      const interval = Math.max(this.ttlMs * fraction, 10);
      this.#timer = setInterval(() => this.#tick(), interval);
      this.#timer.unref?.();
    }
  }

  #tick(): void {
    if (this.#inflight !== undefined || this.#stopping) return;
    this.#inflight = this.heartbeat()
      .catch((error: unknown) => {
        if (error instanceof LeaseLostError) this.#stopTimer();
        // Anything else is transient (unreachable, 503): try again at the next tick.
      })
      .finally(() => {
        this.#inflight = undefined;
      });
  }

  #stopTimer(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** What the call actually used; sent as `actualUsage` on release. Later calls overwrite
   * the values they give. */
  reportUsage(usage: ActualUsage): void {
    Object.assign(this.#usage, checkUsage(usage));
  }

  /** The usage reported so far. */
  get usage(): ActualUsage {
    return { ...this.#usage };
  }

  /** Move the expiry to now + TTL (the timer does this on its own). */
  async heartbeat(): Promise<HeartbeatResult> {
    try {
      const answer = await this.#client.heartbeat(this.leaseId);
      this.expiresAtEpochMs = answer.expiresAtEpochMs ?? this.expiresAtEpochMs;
      this.heartbeats += 1;
      return answer;
    } catch (error) {
      if (error instanceof LeaseLostError && !this.#stopping) this.lost = true;
      throw error;
    }
  }

  /** Release now with this outcome and the reported usage; throws on failure. A second call
   * returns the first one's answer. */
  release(outcome: Outcome = "success", retryAfterMs?: number): Promise<ReleaseResult> {
    if (this.#release === undefined) {
      const body = releaseBody({ outcome, ...(retryAfterMs === undefined ? {} : { retryAfterMs }), actualUsage: this.#usage });
      this.#release = this.#send(body);
    }
    return this.#release;
  }

  async #send(body: ReleaseRequest): Promise<ReleaseResult> {
    this.#stopping = true;
    this.#stopTimer();
    await this.#inflight;
    try {
      const result = await this.#client.releaseRaw(this.leaseId, body);
      this.released = true;
      this.releaseResult = result;
      return result;
    } catch (error) {
      if (error instanceof LeaseLostError) this.lost = true;
      throw error;
    }
  }

  /** @internal The release at the end of `withAdmission`: never throws. */
  async releaseQuietly(threw: boolean, thrown?: unknown): Promise<void> {
    if (this.#release !== undefined) {
      await this.#release.catch(() => undefined);
      return;
    }
    const { outcome, retryAfterMs } = outcomeFor(threw, thrown);
    const body = releaseBody({ outcome, ...(retryAfterMs === undefined ? {} : { retryAfterMs }), actualUsage: this.#usage });
    this.#release = this.#send(body);
    try {
      await this.#release;
    } catch (error) {
      this.releaseError = error;
      // A 4xx for one part of the release (a provider Retry-After above the service's
      // admission.max_retry_after_ms, say): release again without it, so that the slot is
      // freed now rather than at the TTL.
      const field = error instanceof BadRequestError ? (error.field ?? "") : "";
      let retry: ReleaseRequest | undefined;
      if (field.startsWith("actualUsage") && body.actualUsage !== undefined) {
        retry = { ...body };
        delete retry.actualUsage;
      } else if (field === "retryAfterMs" && body.outcome === "retry-after") {
        retry = { outcome: "failure", ...(body.actualUsage ? { actualUsage: body.actualUsage } : {}) };
      }
      if (retry !== undefined) {
        try {
          this.releaseResult = await this.#client.releaseRaw(this.leaseId, retry);
          this.released = true;
        } catch {
          // Kept in releaseError; the service reclaims the lease at its TTL.
        }
      }
    }
  }
}

/**
 * A client of `turnstile serve` with one key. Stateless apart from its options: share one.
 * It never logs.
 */
export class Client {
  readonly baseUrl: string;
  #key: string;
  #timeoutMs: number;
  #fraction: number;
  #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    const fraction = options.heartbeatFraction ?? 1 / 3;
    if (!(fraction > 0 && fraction < 1)) throw new RangeError("heartbeatFraction must be between 0 and 1");
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#key = options.key;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#fraction = fraction;
    this.#fetch = options.fetch ?? globalThis.fetch;
    if (typeof this.#fetch !== "function") throw new TypeError("no fetch: Node >= 18 is required");
  }

  async #request(call: Call): Promise<Answer> {
    const timeoutMs = call.timeoutMs ?? this.#timeoutMs;
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const outer = call.signal;
    const onAbort = (): void => controller.abort(outer?.reason);
    if (outer?.aborted) onAbort();
    outer?.addEventListener("abort", onAbort, { once: true });
    try {
      const headers: Record<string, string> = { authorization: `Bearer ${this.#key}`, accept: "application/json" };
      const init: RequestInit = { method: call.method, headers, signal: controller.signal };
      if (call.body !== undefined) {
        headers["content-type"] = "application/json";
        init.body = JSON.stringify(call.body);
      }
      const response = await this.#fetch(this.baseUrl + call.path, init);
      // Read the body within the same deadline.
      return { status: response.status, headers: response.headers, text: await response.text() };
    } catch (error) {
      if (outer?.aborted) throw outer.reason ?? error;
      const kind = timedOut ? "timeout" : "unreachable";
      const message = error instanceof Error ? `${error.message}${error.cause instanceof Error ? `: ${error.cause.message}` : ""}` : String(error);
      throw new UnavailableError(undefined, { error: kind, message }, undefined, { cause: error });
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    }
  }

  async #json<T>(call: Call, ok: readonly number[] = [200]): Promise<T> {
    const response = await this.#request(call);
    const text = response.text;
    let body: unknown;
    try {
      body = text === "" ? undefined : JSON.parse(text);
    } catch {
      body = undefined;
    }
    if (ok.includes(response.status) && body !== null && typeof body === "object") return body as T;
    if (ok.includes(response.status)) {
      throw new TurnstileError(`HTTP ${response.status}: the answer is not a JSON object`);
    }
    throw errorFromResponse(response.status, body, text, response.headers);
  }

  // Admission.

  /**
   * Acquire a lease, run `fn(lease)`, release the lease when `fn` settles, and return what
   * `fn` returned (or rethrow what it threw). The outcome is `success` when `fn` returns,
   * `retry-after` when it throws an error carrying a provider Retry-After (`retryAfterMs`,
   * or Retry-After headers), `none` for an `AbortError`, `failure` for anything else.
   * Throws `RefusedError` when the service refuses the admission (then `fn` is not called).
   */
  async withAdmission<T>(options: AdmissionOptions, fn: (lease: Lease) => Promise<T> | T): Promise<T> {
    const lease = await this.acquire(options);
    let result: T;
    try {
      result = await fn(lease);
    } catch (error) {
      await lease.releaseQuietly(true, error);
      throw error;
    }
    await lease.releaseQuietly(false);
    return result;
  }

  /** `POST /v1/admissions`: a `Lease` (heartbeating unless `heartbeat: false`), or throws
   * `RefusedError`. Release it with `lease.release(...)`. */
  async acquire(options: AdmissionOptions): Promise<Lease> {
    checkMs("waitMs", options.waitMs);
    const body: AdmissionRequest = {
      providerId: options.providerId,
      budgetId: options.budgetId,
      estimate: options.estimate ?? {},
    };
    if (options.waitMs !== undefined) body.deadlineMs = options.waitMs;
    const response = await this.#request({
      method: "POST",
      path: "/v1/admissions",
      body,
      timeoutMs: this.#timeoutMs + (options.waitMs ?? DEFAULT_MAX_WAIT_MS),
      signal: options.signal,
    });
    const text = response.text;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const record = (parsed ?? {}) as Partial<LeaseBody> & { reason?: Reason; retryable?: boolean };
    if (response.status === 200 && typeof record.leaseId === "string") {
      return new Lease(this, record as LeaseBody, options.providerId, options.budgetId, options.heartbeat ?? true, this.#fraction);
    }
    if (REJECTION_STATUSES.has(response.status) && typeof record.reason === "string") {
      const evidence: Evidence = record.evidence ?? {};
      const hint = typeof evidence.retryAfterMs === "number" ? evidence.retryAfterMs : retryAfterFromHeaders(response.headers);
      throw new RefusedError(response.status, record.reason, record.retryable === true, evidence, hint);
    }
    throw errorFromResponse(response.status, parsed, text, response.headers);
  }

  /** `POST /v1/leases/{leaseId}/release` by lease ID (prefer `lease.release`). */
  async release(leaseId: string, options: ReleaseOptions = {}): Promise<ReleaseResult> {
    return this.releaseRaw(leaseId, releaseBody(options));
  }

  /** @internal */
  async releaseRaw(leaseId: string, body: ReleaseRequest): Promise<ReleaseResult> {
    return this.#json<ReleaseResult>({ method: "POST", path: `/v1/leases/${seg(leaseId)}/release`, body });
  }

  /** `POST /v1/leases/{leaseId}/heartbeat` (leases heartbeat on their own). */
  async heartbeat(leaseId: string): Promise<HeartbeatResult> {
    return this.#json<HeartbeatResult>({ method: "POST", path: `/v1/leases/${seg(leaseId)}/heartbeat` });
  }

  /** `POST /v1/budgets/{budgetId}/release`: forget an invocation's budget. */
  async releaseBudget(budgetId: string): Promise<BudgetReleaseResult> {
    return this.#json<BudgetReleaseResult>({ method: "POST", path: `/v1/budgets/${seg(budgetId)}/release` });
  }

  /** `POST /v1/providers/{providerId}/retry-after`: pause the provider lane. */
  async pauseProvider(providerId: string, retryAfterMs: number): Promise<PauseResult> {
    checkMs("retryAfterMs", retryAfterMs);
    const body: RetryAfterRequest = { retryAfterMs };
    return this.#json<PauseResult>({ method: "POST", path: `/v1/providers/${seg(providerId)}/retry-after`, body });
  }

  // Workspace reads (admin key, or a principal key of that workspace).

  async snapshot(workspaceId: string): Promise<Snapshot> {
    return this.#json<Snapshot>({ method: "GET", path: `/v1/workspaces/${seg(workspaceId)}/snapshot` });
  }

  /**
   * `GET /v1/workspaces/{workspaceId}/events`: the workspace's live feed, as an async iterable
   * of `Update` and `Lagged` events (admin key, or a principal key of that workspace).
   *
   * ```ts
   * for await (const event of client.events("demo", { maxEvents: 10, signal })) {
   *   if (event instanceof Update) console.log(event.lane("llm-subagent")?.queued);
   * }
   * ```
   *
   * An `Update` comes at once, then one per change (at most every 250 ms) and one every second
   * while nothing changes; `principals` is filled for admin keys only. The iteration ends after
   * `maxEvents` events or when the service shuts down; it does not reconnect. The request is
   * sent on the first `next()`, which throws the typed errors (`AuthError` 401,
   * `ForbiddenError` 403, `NotFoundError` 404 `no-profile`, ...); a broken connection, or
   * `timeoutMs` without a byte from the service, throws `UnavailableError`. Leaving a
   * `for await` loop early (`break`, `return`, a throw) or aborting `signal` closes the
   * connection. `maxEvents` is checked here, before any request (`RangeError`).
   */
  events(workspaceId: string, options: EventsOptions = {}): AsyncGenerator<FeedEvent, void, undefined> {
    checkMaxEvents(options.maxEvents);
    const query = options.maxEvents === undefined ? "" : `?maxEvents=${options.maxEvents}`;
    return this.#stream(`/v1/workspaces/${seg(workspaceId)}/events${query}`, options.signal);
  }

  async *#stream(path: string, outer: AbortSignal | undefined): AsyncGenerator<FeedEvent, void, undefined> {
    const controller = new AbortController();
    let timedOut = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    // The timer bounds the service's silence (it sends something every second), never the
    // consumer's: it is stopped while an event is being handled.
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, this.#timeoutMs);
    };
    const onAbort = (): void => controller.abort(outer?.reason);
    if (outer?.aborted) onAbort();
    outer?.addEventListener("abort", onAbort, { once: true });
    const failure = (error: unknown): unknown => {
      if (outer?.aborted) return outer.reason ?? error;
      const kind = timedOut ? "timeout" : "unreachable";
      const message = error instanceof Error ? `${error.message}${error.cause instanceof Error ? `: ${error.cause.message}` : ""}` : String(error);
      return new UnavailableError(undefined, { error: kind, message }, undefined, { cause: error });
    };
    try {
      arm();
      let response: Response;
      try {
        const headers = { authorization: `Bearer ${this.#key}`, accept: "text/event-stream" };
        response = await this.#fetch(this.baseUrl + path, { method: "GET", headers, signal: controller.signal });
      } catch (error) {
        throw failure(error);
      }
      if (response.status !== 200) {
        let text: string;
        try {
          text = await response.text();
        } catch (error) {
          throw failure(error);
        }
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        throw errorFromResponse(response.status, body, text, response.headers);
      }
      const media = (response.headers.get("content-type") ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
      if (media !== "text/event-stream" || response.body === null) {
        throw new ApiError(200, { error: "invalid-response", message: `expected text/event-stream, the answer is ${media || "untyped"}` });
      }
      const reader = response.body.getReader();
      const parser = new SseParser();
      for (;;) {
        arm();
        let chunk: { done: true; value?: undefined } | { done: false; value: Uint8Array };
        try {
          chunk = await reader.read();
        } catch (error) {
          throw failure(error);
        }
        if (chunk.done) {
          parser.close();
          return;
        }
        for (const message of parser.feed(chunk.value)) {
          const event = decodeEvent(message);
          if (event === undefined) continue;
          clearTimeout(timer);
          yield event;
        }
      }
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
      // Closes the connection when the consumer stopped early (a no-op after the end).
      controller.abort();
    }
  }

  async profileHistory(workspaceId: string): Promise<ProfileHistory> {
    return this.#json<ProfileHistory>({ method: "GET", path: `/v1/workspaces/${seg(workspaceId)}/profiles` });
  }

  async breakerHistory(workspaceId: string): Promise<BreakerHistory> {
    return this.#json<BreakerHistory>({ method: "GET", path: `/v1/workspaces/${seg(workspaceId)}/breakers` });
  }

  /** Retry-After pauses of the workspace's provider lanes with their cause (last 64). */
  async pauseHistory(workspaceId: string): Promise<PauseHistory> {
    return this.#json<PauseHistory>({ method: "GET", path: `/v1/workspaces/${seg(workspaceId)}/pauses` });
  }

  /** The workspaces this key may see (admin: every one with a profile; a principal key: its own), each with its current revision. */
  async workspaces(): Promise<WorkspaceList> {
    return this.#json<WorkspaceList>({ method: "GET", path: "/v1/workspaces" });
  }

  /** Grants, share and mean queue delay per principal over the last five minutes (a principal key gets its own row only). */
  async fairness(workspaceId: string): Promise<FairnessView> {
    return this.#json<FairnessView>({ method: "GET", path: `/v1/workspaces/${seg(workspaceId)}/fairness` });
  }

  /** A registered revision's limits (admin); sent back to `registerProfile`, it is a rollback. */
  async profileRevision(workspaceId: string, profileVersion: string): Promise<ProfileRevision> {
    const path = `/v1/workspaces/${seg(workspaceId)}/profiles/${seg(profileVersion)}`;
    return this.#json<ProfileRevision>({ method: "GET", path });
  }

  // Administration (admin key).

  /**
   * Register a profile revision: the change record (201) or `{unchanged: true}` (200). `note`
   * and `approvedBy` are kept with the change in the audit log (the approval on record); a
   * rollback is registering an earlier revision again.
   */
  async registerProfile(
    workspaceId: string,
    profileVersion: string,
    profile: Profile,
    approval: Approval = {},
  ): Promise<ProfileChangeRecord | ProfileUnchanged> {
    const path = `/v1/workspaces/${seg(workspaceId)}/profiles/${seg(profileVersion)}`;
    const body: Profile = { ...profile, ...withApproval(approval) };
    return this.#json<ProfileChangeRecord | ProfileUnchanged>({ method: "PUT", path, body }, [200, 201]);
  }

  // Rollouts (issue 33): a candidate revision in shadow or on a canary slice before it binds.

  /**
   * Start a rollout (admin): `revision` is registered (not current) and tried in `mode`
   * (`canaryShare` of the principals with `canary`); 409 `ConflictError` while one runs.
   */
  async startRollout(
    workspaceId: string,
    revision: string,
    profile: Profile,
    options: { mode?: RolloutMode; canaryShare?: number } & Approval = {},
  ): Promise<Rollout> {
    const body: RolloutStartRequest = { revision, profile, mode: options.mode ?? "shadow", ...withApproval(options) };
    if (options.canaryShare !== undefined) body.canaryShare = options.canaryShare;
    return this.#json<Rollout>({ method: "POST", path: `/v1/workspaces/${seg(workspaceId)}/rollouts`, body }, [201]);
  }

  /** The running rollout and its decision comparison (404 `NotFoundError` `no-rollout`). */
  async currentRollout(workspaceId: string): Promise<Rollout> {
    return this.#json<Rollout>({ method: "GET", path: `/v1/workspaces/${seg(workspaceId)}/rollouts/current` });
  }

  /** Promote the running rollout's candidate (admin): it becomes the current revision. */
  async promoteRollout(workspaceId: string, approval: Approval = {}): Promise<RolloutRecord> {
    const body: RolloutEndRequest = withApproval(approval);
    return this.#json<RolloutRecord>({ method: "POST", path: `/v1/workspaces/${seg(workspaceId)}/rollouts/current/promote`, body });
  }

  /** Abort the running rollout (admin): the current revision stays. */
  async abortRollout(workspaceId: string, approval: Approval = {}): Promise<RolloutRecord> {
    const body: RolloutEndRequest = withApproval(approval);
    return this.#json<RolloutRecord>({ method: "POST", path: `/v1/workspaces/${seg(workspaceId)}/rollouts/current/abort`, body });
  }

  /** Rollout records (started, promoted, aborted) with their approval, oldest first. */
  async rolloutHistory(workspaceId: string): Promise<RolloutHistory> {
    return this.#json<RolloutHistory>({ method: "GET", path: `/v1/workspaces/${seg(workspaceId)}/rollouts` });
  }

  async createKey(workspaceId: string, principalId: string): Promise<CreatedKey> {
    const body: CreateKeyRequest = { principalId };
    return this.#json<CreatedKey>({ method: "POST", path: `/v1/workspaces/${seg(workspaceId)}/keys`, body }, [201]);
  }

  async listKeys(workspaceId: string): Promise<KeyListing> {
    return this.#json<KeyListing>({ method: "GET", path: `/v1/workspaces/${seg(workspaceId)}/keys` });
  }

  async revokeKey(workspaceId: string, keyId: string): Promise<KeyRevocation> {
    return this.#json<KeyRevocation>({ method: "DELETE", path: `/v1/workspaces/${seg(workspaceId)}/keys/${seg(keyId)}` });
  }

  // Operations (no key needed).

  async metrics(): Promise<string> {
    const response = await this.#request({ method: "GET", path: "/metrics" });
    const text = response.text;
    if (response.status === 200) return text;
    throw errorFromResponse(response.status, undefined, text, response.headers);
  }

  async healthz(): Promise<JsonObject> {
    return this.#json<JsonObject>({ method: "GET", path: "/healthz" });
  }

  /** Readiness; throws `UnavailableError` (503) while the service shuts down. */
  async readyz(): Promise<JsonObject> {
    return this.#json<JsonObject>({ method: "GET", path: "/readyz" });
  }

  async openapi(): Promise<JsonObject> {
    return this.#json<JsonObject>({ method: "GET", path: "/openapi.json" });
  }
}
