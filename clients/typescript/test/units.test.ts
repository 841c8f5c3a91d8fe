/** Pure functions, without a service: outcome and Retry-After detection, argument checks. */
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Client,
  OutcomeUnknownError,
  outcomeFor,
  RefusedError,
  RetryAfterError,
  retryAfterMsOf,
  UnavailableError,
} from "turnstile-client";

test("a normal return is success, a throw is failure", () => {
  assert.deepEqual(outcomeFor(false), { outcome: "success" });
  assert.deepEqual(outcomeFor(true, new Error("boom")), { outcome: "failure" });
  assert.deepEqual(outcomeFor(true, "a string"), { outcome: "failure" });
  assert.deepEqual(outcomeFor(true, undefined), { outcome: "failure" });
});

test("an AbortError or TimeoutError is outcome none", () => {
  const controller = new AbortController();
  controller.abort();
  assert.deepEqual(outcomeFor(true, controller.signal.reason), { outcome: "none" });
  assert.deepEqual(outcomeFor(true, Object.assign(new Error("t"), { name: "TimeoutError" })), { outcome: "none" });
});

test("retry-after is read from retryAfterMs and from headers", () => {
  const cases: [unknown, number][] = [
    [new RetryAfterError(2500), 2500],
    [Object.assign(new Error("x"), { retryAfterMs: 1500 }), 1500],
    [Object.assign(new Error("x"), { retryAfterMs: 0.4 }), 1],
    [Object.assign(new Error("x"), { headers: new Headers({ "retry-after": "7" }) }), 7000],
    [Object.assign(new Error("x"), { headers: { "Retry-After": "2" } }), 2000],
    [Object.assign(new Error("x"), { headers: { "retry-after-ms": "1234", "retry-after": "9" } }), 1234],
    [Object.assign(new Error("x"), { response: { headers: new Headers({ "retry-after": "0.5" }) } }), 500],
  ];
  for (const [error, expected] of cases) {
    assert.equal(retryAfterMsOf(error), expected);
    assert.deepEqual(outcomeFor(true, error), { outcome: "retry-after", retryAfterMs: expected });
  }
  const date = new Date(Date.now() + 30_000).toUTCString();
  const fromDate = retryAfterMsOf(Object.assign(new Error("x"), { headers: { "retry-after": date } }));
  assert.ok(fromDate !== undefined && fromDate > 25_000 && fromDate <= 31_000, String(fromDate));
});

test("no or a malformed retry-after is a failure", () => {
  for (const error of [
    new Error("plain"),
    Object.assign(new Error("x"), { retryAfterMs: -1 }),
    Object.assign(new Error("x"), { retryAfterMs: "5" }),
    Object.assign(new Error("x"), { retryAfterMs: Number.NaN }),
    Object.assign(new Error("x"), { headers: { "retry-after": "whenever" } }),
    Object.assign(new Error("x"), { headers: { "retry-after": "" } }),
  ]) {
    assert.equal(retryAfterMsOf(error), undefined);
    assert.deepEqual(outcomeFor(true, error), { outcome: "failure" });
  }
});

test("a refusal by turnstile is not a provider retry-after", () => {
  const refused = new RefusedError(429, "queue-full", true, {}, 1000);
  assert.equal(refused.retryAfterMs, 1000);
  assert.equal(retryAfterMsOf(refused), undefined);
  assert.deepEqual(outcomeFor(true, refused), { outcome: "failure" });
});

test("arguments are checked before any request", async () => {
  const client = new Client({ baseUrl: "http://127.0.0.1:9", key: "tsk_x" });
  await assert.rejects(client.acquire({ providerId: "p", budgetId: "b", waitMs: -1 }), RangeError);
  await assert.rejects(client.acquire({ providerId: "p", budgetId: "b", waitMs: 1.5 }), RangeError);
  await assert.rejects(client.pauseProvider("p", -5), RangeError);
  await assert.rejects(client.release("0".repeat(32), { outcome: "retry-after" }), RangeError);
  await assert.rejects(client.release("0".repeat(32), { actualUsage: { tokens: -1 } }), RangeError);
  await assert.rejects(client.release("0".repeat(32), { outcome: "success", retryAfterMs: 5 }), RangeError);
  assert.throws(() => new Client({ baseUrl: "http://x", key: "k", heartbeatFraction: 1.5 }), RangeError);
});

test("an unknown write outcome is its own UnavailableError", async () => {
  const answer = (error: string) => async () =>
    new Response(JSON.stringify({ error, message: "m" }), {
      status: 503,
      headers: { "content-type": "application/json", "retry-after": "1" },
    });
  const unknown = new Client({ baseUrl: "http://x", key: "k", fetch: answer("coordination-outcome-unknown") });
  await assert.rejects(
    unknown.revokeKey("w", "k1"),
    (e: unknown) =>
      e instanceof OutcomeUnknownError &&
      e instanceof UnavailableError &&
      e.error === "coordination-outcome-unknown" &&
      e.retryAfterMs === 1000,
  );
  const refused = new Client({ baseUrl: "http://x", key: "k", fetch: answer("coordination-unavailable") });
  await assert.rejects(
    refused.revokeKey("w", "k1"),
    (e: unknown) => e instanceof UnavailableError && !(e instanceof OutcomeUnknownError),
  );
});
