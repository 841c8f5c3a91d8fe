/** The workspace's live feed (`GET …/events`) against a real `turnstile serve` (see server.ts). */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  AuthError,
  Client,
  type FeedEvent,
  ForbiddenError,
  NotFoundError,
  SHAPES,
  UnavailableError,
  Update,
} from "turnstile-client";

import { budget, PRINCIPAL, PROFILE, type Service, startService, WORKSPACE } from "./server.js";

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
const shapes = SHAPES as Record<string, Record<string, string>>;

/** Keys of a live object that the shape does not list (recursively through shapes and arrays). */
function unknownKeys(value: unknown, shape: string, where = "$"): string[] {
  const fields = shapes[shape];
  if (fields === undefined || value === null || typeof value !== "object") return [];
  const found: string[] = [];
  for (const [key, child] of Object.entries(value)) {
    const kind = fields[key];
    if (kind === undefined) found.push(`${where}.${key}`);
    else if (kind.endsWith("[]") && Array.isArray(child)) {
      child.forEach((item, i) => found.push(...unknownKeys(item, kind.slice(0, -2), `${where}.${key}[${i}]`)));
    } else found.push(...unknownKeys(child, kind, `${where}.${key}`));
  }
  return found;
}

async function next(events: AsyncGenerator<FeedEvent, void, undefined>): Promise<FeedEvent> {
  const { done, value } = await events.next();
  assert.ok(!done, "the stream ended");
  return value;
}

/** The first update that counts an admission on `provider`. */
async function untilAdmitted(events: AsyncGenerator<FeedEvent, void, undefined>, provider: string): Promise<Update> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const event = await next(events);
    assert.ok(event instanceof Update, `unexpected ${event.event}`);
    assert.deepEqual(unknownKeys(event.data, "FeedUpdate"), []);
    if (event.count(provider, "admitted") >= 1) return event;
    assert.ok(Date.now() < deadline, `no admission on ${provider} within 10 s`);
  }
}

test("a principal key gets the lanes at once", async () => {
  const events = client.events(WORKSPACE, { maxEvents: 1 });
  const first = await next(events);
  assert.ok(first instanceof Update && first.event === "update");
  assert.deepEqual(new Set(first.lanes.map((l) => l.providerId)), new Set(Object.keys(PROFILE.providers)));
  const solo = first.lane("solo");
  assert.equal(solo?.concurrency, 1);
  assert.equal(solo?.breakerState, "closed");
  assert.ok((solo?.requests?.capacity ?? 0) > 0);
  assert.ok(first.atEpochMs > 1_600_000_000_000);
  assert.deepEqual(first.principals, []);
  assert.equal(first.lane("no-such-lane"), undefined);
  assert.deepEqual(unknownKeys(first.data, "FeedUpdate"), []);
  assert.deepEqual(await events.next(), { done: true, value: undefined });
});

test("an admission during the stream shows in a following update; only admin keys see principals", async () => {
  const watched = admin.events(WORKSPACE, { maxEvents: 60 });
  const own = client.events(WORKSPACE, { maxEvents: 60 });
  try {
    assert.ok((await next(watched)) instanceof Update);
    assert.ok((await next(own)) instanceof Update);
    await client.withAdmission({ providerId: "events", budgetId: budget(), estimate: small, waitMs: 1000 }, async () => undefined);
    const seenByAdmin = await untilAdmitted(watched, "events");
    const seenByPrincipal = await untilAdmitted(own, "events");
    assert.ok(seenByAdmin.principals.some((p) => p.principalId === PRINCIPAL && p.grants >= 1));
    assert.deepEqual(seenByPrincipal.principals, []);
    assert.deepEqual(seenByPrincipal.data.principals ?? [], []);
  } finally {
    await watched.return();
    await own.return();
  }
});

test("a principal key never sees principals", async () => {
  let first = true;
  for await (const event of client.events(WORKSPACE, { maxEvents: 4 })) {
    assert.ok(event instanceof Update);
    assert.deepEqual(event.principals, []);
    assert.deepEqual(event.data.principals ?? [], []);
    if (first) {
      first = false;
      for (let i = 0; i < 3; i++) {
        await client.withAdmission({ providerId: "events", budgetId: budget(), estimate: small, waitMs: 1000 }, async () => undefined);
      }
    }
  }
});

test("maxEvents ends the stream", async () => {
  const started = Date.now();
  const got: FeedEvent[] = [];
  for await (const event of client.events(WORKSPACE, { maxEvents: 3 })) got.push(event);
  assert.equal(got.length, 3);
  assert.ok(got.every((e) => e instanceof Update));
  assert.ok(Date.now() - started < 10_000);
});

test("leaving streams early closes their connections", async () => {
  for (let i = 0; i < 120; i++) {
    for await (const event of client.events(WORKSPACE)) {
      assert.ok(event instanceof Update);
      break;
    }
  }
  assert.ok((await client.snapshot(WORKSPACE)).active !== undefined);
});

test("an AbortSignal closes the stream", async () => {
  const controller = new AbortController();
  const events = client.events(WORKSPACE, { signal: controller.signal });
  assert.ok((await next(events)) instanceof Update);
  const pending = events.next();
  controller.abort();
  await assert.rejects(pending, (error: Error) => error.name === "AbortError");
  assert.deepEqual(await events.next(), { done: true, value: undefined });
  // Already aborted: nothing is sent.
  await assert.rejects(client.events(WORKSPACE, { signal: controller.signal }).next(), (e: Error) => e.name === "AbortError");
});

test("the stream ends cleanly when the service shuts down", async () => {
  const own = await startService();
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopping ??= own.stop());
  try {
    const watcher = new Client({ baseUrl: own.baseUrl, key: own.key });
    let count = 0;
    const started = Date.now();
    for await (const event of watcher.events(WORKSPACE)) {
      assert.ok(event instanceof Update);
      if (count++ === 0) setTimeout(() => void stop(), 500);
    }
    // No error: the loop just ends.
    assert.ok(count >= 1 && Date.now() - started < 10_000);
  } finally {
    await stop();
  }
});

test("a workspace without a profile is NotFoundError no-profile", async () => {
  await assert.rejects(admin.events("no-such-workspace").next(), (error: unknown) => {
    assert.ok(error instanceof NotFoundError);
    assert.equal(error.status, 404);
    assert.equal(error.error, "no-profile");
    return true;
  });
});

test("another workspace is ForbiddenError, a wrong key AuthError", async () => {
  await assert.rejects(client.events("demo").next(), ForbiddenError);
  const wrong = new Client({ baseUrl: service.baseUrl, key: `tsk_${"0".repeat(64)}` });
  await assert.rejects(wrong.events(WORKSPACE).next(), (error: unknown) => error instanceof AuthError && error.status === 401);
});

test("maxEvents is checked before any request", () => {
  for (const bad of [0, -1, 100_001, 1.5, Number.NaN]) {
    assert.throws(() => client.events(WORKSPACE, { maxEvents: bad }), RangeError);
  }
  assert.throws(() => client.events("", { maxEvents: 1 }), TypeError);
});

test("an unreachable service is UnavailableError", async () => {
  const nowhere = new Client({ baseUrl: "http://127.0.0.1:9", key: "tsk_x", timeoutMs: 2000 });
  await assert.rejects(nowhere.events(WORKSPACE).next(), (error: unknown) => {
    assert.ok(error instanceof UnavailableError);
    assert.equal(error.status, undefined);
    assert.equal(error.error, "unreachable");
    return true;
  });
});
