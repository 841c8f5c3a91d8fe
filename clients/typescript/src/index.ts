/**
 * Client for the turnstile admission service (`turnstile serve`).
 *
 * ```ts
 * import { Client } from "turnstile-client";
 * const client = new Client({ baseUrl: "http://127.0.0.1:8686", key: process.env.TURNSTILE_KEY! });
 * const answer = await client.withAdmission(
 *   { providerId: "llm-subagent", budgetId: "invocation-42", estimate: { tokens: 800, costUsd: 0.01 }, waitMs: 5000 },
 *   async (lease) => {
 *     const answer = await callModel();
 *     lease.reportUsage({ tokens: answer.tokens, costUsd: answer.cost });
 *     return answer;
 *   },
 * );
 * ```
 */
export { Client, Lease } from "./client.js";
export type { AdmissionOptions, Approval, ClientOptions, EventsOptions, ReleaseOptions } from "./client.js";
export { Lagged, MAX_EVENTS, SseParser, Update, decodeEvent } from "./events.js";
export type { FeedEvent, SseMessage } from "./events.js";
export {
  ApiError,
  AuthError,
  BadRequestError,
  ConflictError,
  ForbiddenError,
  LeaseLostError,
  NotFoundError,
  OutcomeUnknownError,
  RefusedError,
  RetryAfterError,
  TurnstileError,
  UnavailableError,
  outcomeFor,
  retryAfterMsOf,
} from "./errors.js";
export * from "./types.js";
