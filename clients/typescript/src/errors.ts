import type { ErrorBody, Evidence, Outcome, Reason } from "./types.js";

/** Base of every error the client throws. */
export class TurnstileError extends Error {
  override name = "TurnstileError";
}

/**
 * The service refused the admission (a typed rejection: 403, 409, 422, 429 or 503).
 * `retryable` says whether the *same* request may succeed later; `retryAfterMs` is the
 * service's hint (the evidence's `retryAfterMs`, else the `Retry-After` header).
 */
export class RefusedError extends TurnstileError {
  override name = "RefusedError";
  constructor(
    readonly status: number,
    readonly reason: Reason,
    readonly retryable: boolean,
    readonly evidence: Evidence,
    readonly retryAfterMs: number | undefined,
  ) {
    const hint = retryAfterMs === undefined ? "" : `, retry after ${retryAfterMs} ms`;
    super(`admission refused: ${reason} (HTTP ${status}, retryable=${retryable}${hint})`);
  }

  /**
   * On `deadline-unreachable`: the wait the lane predicted for the request, in milliseconds (it
   * exceeded the deadline; `retryAfterMs` equals it). Undefined otherwise.
   */
  get predictedWaitMs(): number | undefined {
    const value = this.evidence.predictedWaitMs;
    return typeof value === "number" ? value : undefined;
  }
}

/** An error answer `{error, message, field?}`; `status` is undefined for transport failures. */
export class ApiError extends TurnstileError {
  override name = "ApiError";
  /** The service's machine-readable code (`invalid-request`, `unknown-lease`, ...). */
  readonly error: string;
  /** The field the service names, if any. */
  readonly field: string | undefined;
  /** The service's own message. */
  readonly detail: string;
  constructor(
    readonly status: number | undefined,
    body: ErrorBody,
    /** `Retry-After` of the answer in ms (503 `storage-error` carries one). */
    readonly retryAfterMs?: number,
    options?: { cause?: unknown },
  ) {
    const where = body.field ? ` (field ${body.field})` : "";
    super(`${status === undefined ? "" : `HTTP ${status} `}${body.error}: ${body.message}${where}`, options);
    this.error = body.error;
    this.field = body.field;
    this.detail = body.message;
  }
}

/** 400 `malformed-json`, 413 `body-too-large`, 422 `invalid-request` / `invalid-definition`. */
export class BadRequestError extends ApiError {
  override name = "BadRequestError";
}
/** 401: the key is missing, unknown or revoked. */
export class AuthError extends ApiError {
  override name = "AuthError";
}
/** 403: the key is valid but may not do this (e.g. an admin key acquiring a lease). */
export class ForbiddenError extends ApiError {
  override name = "ForbiddenError";
}
/** 404: unknown workspace profile, key, provider lane, ... */
export class NotFoundError extends ApiError {
  override name = "NotFoundError";
}
/** 404 `unknown-lease`: released, reclaimed after its TTL, or never granted. */
export class LeaseLostError extends NotFoundError {
  override name = "LeaseLostError";
}
/** 409 `invalid-definition`: a profile revision reused with other limits. */
export class ConflictError extends ApiError {
  override name = "ConflictError";
}
/** 503 `shutting-down` / `storage-error` / `coordination-unavailable` (replicas: nothing was
 * written), or a transport failure (`status` undefined, `error` `unreachable` or `timeout`). */
export class UnavailableError extends ApiError {
  override name = "UnavailableError";
}
/**
 * 503 `coordination-outcome-unknown` (replicas): a key, revocation or profile write was sent
 * to the shared store (Redis), which did not answer. It either applied before this answer or
 * never will; once Redis answers, the keys and profiles every replica lists show which. Check
 * them before writing again (a repeated key creation makes a second key).
 */
export class OutcomeUnknownError extends UnavailableError {
  override name = "OutcomeUnknownError";
}

/**
 * Throw this (or any error with a numeric `retryAfterMs`) from a `withAdmission` callback
 * when the provider answered with a Retry-After: the lease is released with outcome
 * `retry-after`, which pauses the provider lane for the whole workspace.
 */
export class RetryAfterError extends Error {
  override name = "RetryAfterError";
  constructor(
    readonly retryAfterMs: number,
    message?: string,
  ) {
    super(message ?? `provider asked to retry after ${retryAfterMs} ms`);
  }
}

function nonNegative(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : undefined;
}

function header(headers: unknown, name: string): string | undefined {
  if (headers === null || typeof headers !== "object") return undefined;
  const get = (headers as { get?: unknown }).get;
  if (typeof get === "function") {
    const value: unknown = get.call(headers, name);
    return typeof value === "string" ? value : undefined;
  }
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === name && typeof value === "string") return value;
  }
  return undefined;
}

/** `retry-after-ms` (ms), else `retry-after` (seconds or an HTTP date), in ms. */
export function retryAfterFromHeaders(headers: unknown): number | undefined {
  const ms = header(headers, "retry-after-ms");
  if (ms !== undefined && ms.trim() !== "") {
    const value = nonNegative(Number(ms));
    if (value !== undefined) return Math.ceil(value);
  }
  const text = header(headers, "retry-after")?.trim();
  if (!text) return undefined;
  const seconds = nonNegative(Number(text));
  if (seconds !== undefined) return Math.ceil(seconds * 1000);
  const when = Date.parse(text);
  if (!Number.isNaN(when) && /[a-z]/i.test(text)) return Math.max(0, Math.ceil(when - Date.now()));
  return undefined;
}

/**
 * The provider Retry-After carried by a thrown value, in ms, or undefined: a numeric
 * `retryAfterMs` property, else the `headers` or `response.headers` of the error (a
 * `Headers` or a plain object, as on the OpenAI / Anthropic SDK errors): `retry-after-ms`,
 * then `retry-after`. The client's own errors never count.
 */
export function retryAfterMsOf(error: unknown): number | undefined {
  if (error === null || typeof error !== "object" || error instanceof TurnstileError) return undefined;
  const record = error as { retryAfterMs?: unknown; headers?: unknown; response?: { headers?: unknown } };
  const ms = nonNegative(record.retryAfterMs);
  if (ms !== undefined) return Math.ceil(ms);
  for (const headers of [record.headers, record.response?.headers]) {
    const found = retryAfterFromHeaders(headers);
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * The release outcome for how a `withAdmission` callback ended: `success` when it returned;
 * `retry-after` when it threw an error carrying a provider Retry-After; `none` when it threw
 * an `AbortError` (the caller gave up: not the provider's fault); `failure` otherwise.
 */
export function outcomeFor(threw: boolean, error?: unknown): { outcome: Outcome; retryAfterMs?: number } {
  if (!threw) return { outcome: "success" };
  if (error instanceof Error && (error.name === "AbortError" || error.name === "TimeoutError")) {
    return { outcome: "none" };
  }
  const retryAfterMs = retryAfterMsOf(error);
  if (retryAfterMs !== undefined) return { outcome: "retry-after", retryAfterMs };
  return { outcome: "failure" };
}

export function errorFromResponse(
  status: number,
  body: unknown,
  text: string,
  headers: Headers,
): ApiError {
  const record = (body !== null && typeof body === "object" ? body : {}) as Partial<ErrorBody>;
  const parsed: ErrorBody =
    typeof record.error === "string" && record.error !== ""
      ? {
          error: record.error,
          message: typeof record.message === "string" ? record.message : "",
          ...(typeof record.field === "string" ? { field: record.field } : {}),
        }
      : { error: `http-${status}`, message: text.slice(0, 200) };
  const retryAfter = retryAfterFromHeaders(headers);
  if (status === 400 || status === 413 || status === 422) return new BadRequestError(status, parsed, retryAfter);
  if (status === 401) return new AuthError(status, parsed, retryAfter);
  if (status === 403) return new ForbiddenError(status, parsed, retryAfter);
  if (status === 404) {
    return parsed.error === "unknown-lease"
      ? new LeaseLostError(status, parsed, retryAfter)
      : new NotFoundError(status, parsed, retryAfter);
  }
  if (status === 409) return new ConflictError(status, parsed, retryAfter);
  if (status === 503) {
    return parsed.error === "coordination-outcome-unknown"
      ? new OutcomeUnknownError(status, parsed, retryAfter)
      : new UnavailableError(status, parsed, retryAfter);
  }
  return new ApiError(status, parsed, retryAfter);
}
