/** The client against a real `turnstile serve` (see server.ts). */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  AuthError,
  BadRequestError,
  ConflictError,
  Client,
  ForbiddenError,
  type Lease,
  LeaseLostError,
  NotFoundError,
  RefusedError,
  RetryAfterError,
  SHAPES,
  UnavailableError,
} from "turnstile-client";

import { budget, metric, PROFILE, type Service, sleep, startService, TTL_MS, WORKSPACE } from "./server.js";

let service: Service;
let client: Client;
let admin: Client;

before(async () => {
  service = await startService();
  client = new Client({ baseUrl: service.baseUrl, key: service.key });
  admin = new Client({ baseUrl: service.baseUrl, key: service.adminKey });
});

after(async () => {
  await service?.stop();
});

const small = { tokens: 1, costUsd: 0.001 };

/** What a provider SDK might throw on a 429: it carries the provider's Retry-After. */
class ProviderRateLimited extends Error {
  readonly retryAfterMs = 5000;
}

async function refusal(promise: Promise<unknown>): Promise<RefusedError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof RefusedError, `expected a RefusedError, got ${String(error)}`);
    return error;
  }
  assert.fail("admitted");
}

test("admit and release with actual usage", async () => {
  const before = await client.metrics();
  let held: Lease | undefined;
  const answer = await client.withAdmission(
    { providerId: "steady", budgetId: budget(), estimate: { tokens: 800, costUsd: 0.01 }, waitMs: 2000 },
    async (lease) => {
      held = lease;
      assert.equal(lease.leaseId.length, 32);
      assert.equal(lease.ttlMs, TTL_MS);
      assert.equal(lease.evidence.decision, "admit");
      assert.equal(lease.evidence.reason, "admitted");
      assert.equal((await client.snapshot(WORKSPACE)).providers.steady?.active, 1);
      lease.reportUsage({ tokens: 734, costUsd: 0.0092 });
      return "the answer";
    },
  );
  assert.equal(answer, "the answer");
  assert.ok(held?.released && held.releaseError === undefined && !held.lost);
  assert.deepEqual(held.releaseResult, { released: true, breakerTransitions: [] });
  const after = await client.metrics();
  assert.equal(metric(after, "turnstile_actual_tokens_total") - metric(before, "turnstile_actual_tokens_total"), 734);
  assert.equal(
    metric(after, "turnstile_actual_cost_micro_usd_total") - metric(before, "turnstile_actual_cost_micro_usd_total"),
    9200,
  );
  assert.equal((await client.snapshot(WORKSPACE)).providers.steady?.active, 0);
});

function unknownKeys(body: unknown, shape: string, where = "$"): string[] {
  if (shape.endsWith("[]")) {
    return Array.isArray(body) ? body.flatMap((item, i) => unknownKeys(item, shape.slice(0, -2), `${where}[${i}]`)) : [];
  }
  if (shape.startsWith("{")) {
    const inner = shape.slice(1, -1);
    return Object.entries(body as object).flatMap(([k, v]) => unknownKeys(v, inner, `${where}{${k}}`));
  }
  const fields = (SHAPES as Record<string, Record<string, string>>)[shape];
  if (fields === undefined || body === null || typeof body !== "object") return [];
  return Object.entries(body).flatMap(([key, value]) => {
    const kind = fields[key];
    return kind === undefined ? [`${where}.${key}`] : unknownKeys(value, kind, `${where}.${key}`);
  });
}

test("live answers have only fields the client knows", async () => {
  const lease = await client.acquire({ providerId: "steady", budgetId: budget(), estimate: small, waitMs: 1000 });
  assert.deepEqual(unknownKeys(lease.evidence, "Evidence"), []);
  assert.deepEqual(unknownKeys(await lease.heartbeat(), "HeartbeatResult"), []);
  assert.deepEqual(unknownKeys(await lease.release(), "ReleaseResult"), []);
  assert.deepEqual(unknownKeys(await client.snapshot(WORKSPACE), "Snapshot"), []);
  assert.deepEqual(unknownKeys(await admin.listKeys(WORKSPACE), "KeyListing"), []);
  assert.deepEqual(unknownKeys(await client.profileHistory(WORKSPACE), "ProfileHistory"), []);
});

test("a request that can never fit is refused with typed fields", async () => {
  let called = false;
  const error = await refusal(
    client.withAdmission({ providerId: "steady", budgetId: budget(), estimate: { tokens: 5000, costUsd: 0.01 }, waitMs: 1000 }, () => {
      called = true;
    }),
  );
  assert.equal(called, false);
  assert.equal(error.status, 422);
  assert.equal(error.reason, "tokens-per-second");
  assert.equal(error.retryable, false);
  assert.equal(error.evidence.decision, "reject");
  assert.equal(error.evidence.estimatedTokens, 5000);
  assert.equal(error.retryAfterMs, undefined);
});

test("a throw releases with outcome failure", async () => {
  let held: Lease | undefined;
  await assert.rejects(
    client.withAdmission({ providerId: "fragile", budgetId: budget(), estimate: small, waitMs: 1000 }, async (lease) => {
      held = lease;
      throw new Error("provider broke");
    }),
    /provider broke/,
  );
  assert.ok(held?.released && held.releaseError === undefined);
  const [transition] = held.releaseResult?.breakerTransitions ?? [];
  assert.deepEqual([transition?.providerId, transition?.from, transition?.to], ["fragile", "closed", "open"]);
  const history = (await client.breakerHistory(WORKSPACE)).records;
  assert.ok(history.some((r) => r.providerId === "fragile" && r.to === "open"));
  const error = await refusal(client.acquire({ providerId: "fragile", budgetId: budget(), estimate: small, waitMs: 100 }));
  assert.equal(error.reason, "circuit-open");
  assert.equal(error.status, 503);
  assert.ok((error.retryAfterMs ?? 0) > 0);
});

test("a throw carrying retryAfterMs pauses the provider", async () => {
  let held: Lease | undefined;
  await assert.rejects(
    client.withAdmission({ providerId: "pausable", budgetId: budget(), estimate: small, waitMs: 1000 }, (lease) => {
      held = lease;
      lease.reportUsage({ tokens: 3 });
      throw new ProviderRateLimited("429 from the provider");
    }),
    ProviderRateLimited,
  );
  assert.ok(held?.released && held.releaseError === undefined);
  const pausedUntil = (await client.snapshot(WORKSPACE)).providers.pausable?.pausedUntil ?? 0;
  assert.ok(pausedUntil > Date.now() + 3000, `paused until ${pausedUntil}`);
  const error = await refusal(client.acquire({ providerId: "pausable", budgetId: budget(), estimate: small, waitMs: 200 }));
  assert.equal(error.reason, "retry-after");
  assert.equal(error.status, 503);
  assert.equal(error.retryable, true);
  assert.ok(error.retryAfterMs !== undefined && error.retryAfterMs > 3000 && error.retryAfterMs <= 5000);
});

test("a throw with Retry-After headers (as SDK errors carry) pauses the provider", async () => {
  const sdkError = Object.assign(new Error("rate limited"), { status: 429, headers: new Headers({ "retry-after": "4" }) });
  await assert.rejects(
    client.withAdmission({ providerId: "headers", budgetId: budget(), estimate: small, waitMs: 1000 }, () => {
      throw sdkError;
    }),
  );
  const error = await refusal(client.acquire({ providerId: "headers", budgetId: budget(), estimate: small, waitMs: 100 }));
  assert.equal(error.reason, "retry-after");
  assert.ok(error.retryAfterMs !== undefined && error.retryAfterMs > 2000 && error.retryAfterMs <= 4000);
});

test("a Retry-After above the service maximum still frees the slot", async () => {
  let held: Lease | undefined;
  await assert.rejects(
    client.withAdmission({ providerId: "steady", budgetId: budget(), estimate: small, waitMs: 1000 }, (lease) => {
      held = lease;
      throw new RetryAfterError(10 * 3_600_000);
    }),
    RetryAfterError,
  );
  assert.ok(held?.releaseError instanceof BadRequestError);
  assert.equal(held.releaseError.field, "retryAfterMs");
  assert.ok(held.released);
  assert.equal((await client.snapshot(WORKSPACE)).providers.steady?.active, 0);
});

test("heartbeats keep a lease alive past its TTL", async () => {
  const expiredBefore = metric(await client.metrics(), "turnstile_leases_expired_total");
  let held: Lease | undefined;
  await client.withAdmission({ providerId: "solo", budgetId: budget(), estimate: small, waitMs: 1000 }, async (lease) => {
    held = lease;
    await sleep(2.5 * TTL_MS);
    // Still ours: the lane's only slot is taken.
    await refusal(client.acquire({ providerId: "solo", budgetId: budget(), estimate: small, waitMs: 100 }));
    assert.equal(lease.lost, false);
  });
  assert.ok(held !== undefined && held.heartbeats >= 4, `heartbeats: ${held?.heartbeats}`);
  assert.ok(held.released && held.releaseError === undefined);
  assert.equal(metric(await client.metrics(), "turnstile_leases_expired_total"), expiredBefore);
});

test("without heartbeats the lease is reclaimed at its TTL", async () => {
  const expiredBefore = metric(await client.metrics(), "turnstile_leases_expired_total");
  let held: Lease | undefined;
  await client.withAdmission(
    { providerId: "expiry", budgetId: budget(), estimate: small, waitMs: 1000, heartbeat: false },
    async (lease) => {
      held = lease;
      await sleep(2 * TTL_MS);
    },
  );
  assert.ok(held && !held.released && held.lost);
  assert.ok(held.releaseError instanceof LeaseLostError);
  assert.equal(held.releaseError.error, "unknown-lease");
  assert.equal(metric(await client.metrics(), "turnstile_leases_expired_total"), expiredBefore + 1);
});

test("an AbortError releases with outcome none (the breaker does not count it)", async () => {
  await assert.rejects(
    client.withAdmission({ providerId: "abort-lane", budgetId: budget(), estimate: small, waitMs: 1000 }, async () => {
      const controller = new AbortController();
      controller.abort();
      controller.signal.throwIfAborted();
    }),
    { name: "AbortError" },
  );
  // abort-lane opens after one failure: still admitting means the outcome was not a failure.
  await client.withAdmission({ providerId: "abort-lane", budgetId: budget(), estimate: small, waitMs: 200 }, () => undefined);
});

test("aborting a queued admission leaves the service's queue", async () => {
  const before = metric(await client.metrics(), "turnstile_waiters_disconnected_total");
  await client.withAdmission({ providerId: "solo", budgetId: budget(), estimate: small, waitMs: 1000 }, async () => {
    const controller = new AbortController();
    const waiting = client.acquire({ providerId: "solo", budgetId: budget(), estimate: small, waitMs: 20000, signal: controller.signal });
    let queued = false;
    for (let i = 0; i < 100 && !queued; i += 1) {
      await sleep(20);
      queued = (await client.snapshot(WORKSPACE)).providers.solo?.queued === 1;
    }
    assert.ok(queued, "the second admission never queued");
    controller.abort();
    await assert.rejects(waiting, { name: "AbortError" });
    for (let i = 0; i < 100; i += 1) {
      if ((await client.snapshot(WORKSPACE)).providers.solo?.queued === 0) break;
      await sleep(20);
    }
    assert.equal((await client.snapshot(WORKSPACE)).providers.solo?.queued, 0);
  });
  assert.equal(metric(await client.metrics(), "turnstile_waiters_disconnected_total"), before + 1);
});

test("explicit release throws and is idempotent", async () => {
  const lease = await client.acquire({ providerId: "steady", budgetId: budget(), estimate: small, waitMs: 1000 });
  const first = await lease.release("none");
  assert.equal(first.released, true);
  assert.equal(await lease.release("failure"), first);
  await assert.rejects(client.release(lease.leaseId, { outcome: "success" }), LeaseLostError);
  await assert.rejects(client.heartbeat(lease.leaseId), LeaseLostError);
});

test("budget release, provider pause, histories, health", async () => {
  const spent = budget();
  await client.withAdmission({ providerId: "steady", budgetId: spent, estimate: { tokens: 1, costUsd: 0.5 }, waitMs: 1000 }, () => 1);
  assert.deepEqual(await client.releaseBudget(spent), { released: true });
  assert.deepEqual(await client.releaseBudget(spent), { released: false });
  assert.ok((await client.pauseProvider("pausable", 1000)).pausedUntilEpochMs > Date.now());
  await assert.rejects(client.pauseProvider("no-such-provider", 1000), NotFoundError);
  const records = (await client.profileHistory(WORKSPACE)).records;
  assert.deepEqual(records.map((r) => [r.kind, r.profileVersion]), [["initial", "v1"]]);
  assert.deepEqual(await client.healthz(), { status: "ok" });
  assert.deepEqual(await client.readyz(), { status: "ready" });
  assert.match(String((await client.openapi()).openapi), /^3\./);
});

test("admin: profiles and keys", async () => {
  assert.deepEqual(await admin.registerProfile(WORKSPACE, "v1", PROFILE), { unchanged: true, profileVersion: "v1" });
  const created = await admin.createKey(WORKSPACE, "ts");
  assert.match(created.key, /^tsk_/);
  assert.ok((await admin.listKeys(WORKSPACE)).keys.some((k) => k.keyId === created.keyId));
  const fresh = new Client({ baseUrl: service.baseUrl, key: created.key });
  assert.ok((await fresh.snapshot(WORKSPACE)).active >= 0);
  const revocation = await admin.revokeKey(WORKSPACE, created.keyId);
  assert.equal(revocation.schema, "turnstile-key-revocation/v1");
  assert.equal(revocation.keyId, created.keyId);
  await assert.rejects(fresh.snapshot(WORKSPACE), AuthError);
  await assert.rejects(admin.revokeKey(WORKSPACE, created.keyId), (e: unknown) => e instanceof NotFoundError && e.error === "unknown-key");
});

test("a revision change keeps its approval on record (issue 33, item 4)", async () => {
  const workspace = "ts-approvals";
  const record = await admin.registerProfile(workspace, "v1", PROFILE, { note: "CHG-8\nfirst limits", approvedBy: "Dana" });
  assert.deepEqual(unknownKeys(record, "ProfileChangeRecord"), []);
  assert.ok("note" in record);
  assert.deepEqual([record.note, record.approvedBy], ["CHG-8\nfirst limits", "Dana"]);
  await assert.rejects(
    admin.registerProfile(workspace, "v2", PROFILE, { approvedBy: "x".repeat(129) }),
    (e: unknown) => e instanceof BadRequestError && e.status === 422 && e.error === "invalid-request" && e.field === "approvedBy",
  );
  const history = (await admin.profileHistory(workspace)).records;
  assert.deepEqual(
    history.map((r) => [r.kind, r.note, r.approvedBy]),
    [["initial", "CHG-8\nfirst limits", "Dana"]],
  );
});

test("a rollout is started, read, promoted and listed (issue 33)", async () => {
  const workspace = "ts-rollouts";
  await admin.registerProfile(workspace, "v1", PROFILE);
  const tighter = { ...PROFILE, workspace: { ...PROFILE.workspace, concurrency: 8 } };
  const started = await admin.startRollout(workspace, "v2", tighter, { mode: "shadow", note: "try 8", approvedBy: "Dana" });
  assert.deepEqual(unknownKeys(started, "Rollout"), []);
  assert.deepEqual([started.revision, started.mode, started.canaryShare], ["v2", "shadow", null]);
  assert.equal((await admin.currentRollout(workspace)).decisions.compared, 0);
  await assert.rejects(
    admin.startRollout(workspace, "v3", tighter, { mode: "canary", canaryShare: 0.5 }),
    (e: unknown) => e instanceof ConflictError && e.error === "rollout-running",
  );
  await assert.rejects(admin.abortRollout(workspace, { approvedBy: "" }), (e: unknown) => e instanceof BadRequestError && e.field === "approvedBy");
  const promoted = await admin.promoteRollout(workspace, { note: "clean", approvedBy: "CAB-1" });
  assert.deepEqual(unknownKeys(promoted, "RolloutRecord"), []);
  assert.deepEqual([promoted.event, promoted.approvedBy], ["promoted", "CAB-1"]);
  await assert.rejects(admin.currentRollout(workspace), (e: unknown) => e instanceof NotFoundError && e.error === "no-rollout");
  const records = (await admin.rolloutHistory(workspace)).records;
  assert.deepEqual(records.map((r) => [r.event, r.note]), [["started", "try 8"], ["promoted", "clean"]]);
  assert.equal((await admin.profileHistory(workspace)).records.at(-1)?.profileVersion, "v2");
});

test("console reads: pauses with their cause, fairness by key, a revision, who changed it", async () => {
  await assert.rejects(
    client.withAdmission({ providerId: "pausable", budgetId: budget(), estimate: small, waitMs: 6000 }, () => {
      throw new ProviderRateLimited("429 from the provider");
    }),
    ProviderRateLimited,
  );
  const pauses = await client.pauseHistory(WORKSPACE);
  assert.deepEqual(unknownKeys(pauses, "PauseHistory"), []);
  const last = pauses.records[pauses.records.length - 1];
  assert.deepEqual([last?.schema, last?.providerId, last?.cause, last?.retryAfterMs], [
    "turnstile-provider-pause/v1",
    "pausable",
    "release-outcome",
    5000,
  ]);

  await client.withAdmission({ providerId: "steady", budgetId: budget(), estimate: small, waitMs: 1000 }, () => 1);
  const everyone = await admin.fairness(WORKSPACE);
  assert.deepEqual(unknownKeys(everyone, "FairnessView"), []);
  assert.ok(everyone.totalGrants >= 1);
  assert.ok(Math.abs(everyone.principals.reduce((sum, p) => sum + p.share, 0) - 1) < 1e-9);
  let own = await client.fairness(WORKSPACE);
  assert.deepEqual(own.principals.map((p) => p.principalId), ["ts"]);
  // Tokens served: the estimate at admission, replaced by the usage the release reports; the
  // principal's weight and band and each lane's mode come from the profile in force.
  const before = own.principals[0]?.tokens ?? -1;
  await client.withAdmission({ providerId: "fair", budgetId: budget(), estimate: { tokens: 4000, costUsd: 0.01 }, waitMs: 1000 }, async (lease) => {
    assert.equal((await client.fairness(WORKSPACE)).principals[0]?.tokens, before + 4000);
    lease.reportUsage({ tokens: 1234 });
  });
  own = await client.fairness(WORKSPACE);
  const row = own.principals[0];
  assert.deepEqual([row?.tokens, row?.weight, row?.priority, row?.tokenShare], [before + 1234, 2, "interactive", 1]);
  assert.equal(own.totalTokens, row?.tokens);
  assert.equal(own.minutes.reduce((sum, m) => sum + m.tokens, 0), own.totalTokens);
  const modes = Object.fromEntries(own.providers.map((p) => [p.providerId, p.fairness]));
  assert.deepEqual([modes.fair, modes.steady], ["tokens", "requests"]);
  await assert.rejects(admin.fairness("no-such-workspace"), (e: unknown) => e instanceof NotFoundError && e.error === "no-profile");

  // The workspaces a key may see: the admin every one with a profile, a principal its own.
  const listed = await admin.workspaces();
  assert.deepEqual(unknownKeys(listed, "WorkspaceList"), []);
  assert.ok(listed.workspaces.some((w) => w.workspaceId === WORKSPACE && w.profileVersion === "v1"));
  assert.deepEqual(await client.workspaces(), { workspaces: [{ workspaceId: WORKSPACE, profileVersion: "v1" }] });

  const revision = await admin.profileRevision(WORKSPACE, "v1");
  assert.deepEqual(unknownKeys(revision, "ProfileRevision"), []);
  assert.equal(revision.profileVersion, "v1");
  assert.ok("steady" in revision.profile.providers);
  await assert.rejects(client.profileRevision(WORKSPACE, "v1"), ForbiddenError);
  await assert.rejects(admin.profileRevision(WORKSPACE, "v404"), (e: unknown) => e instanceof NotFoundError && e.error === "unknown-revision");
  const [first] = (await client.profileHistory(WORKSPACE)).records;
  assert.match(String(first?.actorKeyId), /^key_[0-9a-f]{16}$/);
});

test("a wrong key is a typed auth error", async () => {
  const wrong = new Client({ baseUrl: service.baseUrl, key: `tsk_${"0".repeat(64)}` });
  await assert.rejects(
    wrong.withAdmission({ providerId: "steady", budgetId: budget(), estimate: small, waitMs: 100 }, () => assert.fail("admitted")),
    (e: unknown) => e instanceof AuthError && e.status === 401 && e.error === "unauthorized",
  );
});

test("an admin key may not acquire", async () => {
  await assert.rejects(
    admin.acquire({ providerId: "steady", budgetId: budget() }),
    (e: unknown) => e instanceof ForbiddenError && e.status === 403 && e.error === "forbidden",
  );
});

test("a bad request carries the service's error and field", async () => {
  await assert.rejects(
    client.acquire({ providerId: "steady", budgetId: budget(), estimate: small, waitMs: 10 ** 9 }),
    (e: unknown) =>
      e instanceof BadRequestError && e.status === 422 && e.error === "invalid-request" && e.field === "deadlineMs" && /deadlineMs/.test(e.detail),
  );
  await assert.rejects(
    client.acquire({ providerId: "steady", budgetId: budget(), estimate: { costUSD: 1 } as never }),
    (e: unknown) => e instanceof BadRequestError && e.status === 422 && e.error === "invalid-request",
  );
});

test("an unreachable service is unavailable", async () => {
  const nowhere = new Client({ baseUrl: "http://127.0.0.1:9", key: "tsk_x", timeoutMs: 2000 });
  await assert.rejects(
    nowhere.acquire({ providerId: "steady", budgetId: budget() }),
    (e: unknown) => e instanceof UnavailableError && e.status === undefined && e.error === "unreachable",
  );
});
