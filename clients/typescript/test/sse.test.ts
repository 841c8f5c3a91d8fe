/** The event-stream parser and the typed events, without a service (edge cases of the format). */
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ApiError,
  Client,
  type FeedEvent,
  ForbiddenError,
  Lagged,
  NotFoundError,
  type SseMessage,
  SseParser,
  UnavailableError,
  Update,
  decodeEvent,
} from "turnstile-client";

const UPDATE = {
  atEpochMs: 2000,
  sinceEpochMs: 1750,
  lanes: [
    {
      providerId: "p",
      active: 1,
      concurrency: 4,
      queued: 0,
      oldestWaitMs: null,
      requests: { available: 9, capacity: 10 },
      tokens: null,
      breakerState: "closed",
      nextProbeAt: null,
      pausedUntil: null,
    },
  ],
  decisions: [
    { providerId: "p", reason: "admitted", count: 3 },
    { providerId: "p", reason: "queue-full", count: 1 },
  ],
  transitions: [],
  pauses: [],
  dropped: 0,
};

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

function parse(...chunks: (string | Uint8Array)[]): [string, string][] {
  const parser = new SseParser();
  const out: SseMessage[] = [];
  for (const chunk of chunks) out.push(...parser.feed(typeof chunk === "string" ? bytes(chunk) : chunk));
  parser.close();
  return out.map((m) => [m.event, m.data]);
}

test("an event with a name and data", () => {
  assert.deepEqual(parse("event: update\ndata: {}\n\n"), [["update", "{}"]]);
});

test("data lines are joined with a line feed", () => {
  assert.deepEqual(parse("event: x\ndata: one\ndata:two\ndata\ndata:  three\n\n"), [["x", "one\ntwo\n\n three"]]);
});

for (const [name, eol] of [
  ["LF", "\n"],
  ["CRLF", "\r\n"],
  ["CR", "\r"],
] as const) {
  test(`lines ending with ${name}`, () => {
    const stream = ["event: a", "data: 1", "", ": heartbeat", "", "data: 2", "", ""].join(eol);
    assert.deepEqual(parse(stream), [
      ["a", "1"],
      ["message", "2"],
    ]);
  });
}

test("a CRLF split between two chunks is one line ending", () => {
  assert.deepEqual(parse("data: a\r", "\ndata: b\r\n", "\r\n"), [["message", "a\nb"]]);
});

test("feeding byte by byte gives the same events (multi-byte characters split too)", () => {
  const stream = bytes('\ufeff: hello\r\nevent: update\r\ndata: {"é": "✓"}\r\n\r\nevent: lagged\ndata: {"missed": 3}\n\nretry: 10\rdata: x\r\r');
  const whole = parse(stream);
  assert.deepEqual(whole, [
    ["update", '{"é": "✓"}'],
    ["lagged", '{"missed": 3}'],
    ["message", "x"],
  ]);
  assert.deepEqual(parse(...Array.from(stream, (b) => Uint8Array.of(b))), whole);
});

test("comments are ignored anywhere", () => {
  assert.deepEqual(parse(":keep-alive\n\n: x\nevent: a\n:comment\ndata: 1\n\n"), [["a", "1"]]);
});

test("an event without data is not dispatched and its name does not leak", () => {
  assert.deepEqual(parse("event: a\n\ndata: 1\n\n"), [["message", "1"]]);
  assert.deepEqual(parse("data:\n\n"), [["message", ""]]);
});

test("id, retry and unknown fields", () => {
  const parser = new SseParser();
  const out = parser.feed(bytes("id: 7\nretry: 1500\nfoo: bar\ndata: a\n\nid: x\0y\ndata: b\n\nretry: soon\n\n"));
  assert.deepEqual(
    out.map((m) => [m.data, m.id]),
    [
      ["a", "7"],
      ["b", "7"],
    ],
  );
  assert.equal(parser.retryMs, 1500);
});

test("a byte-order mark is dropped only at the start", () => {
  assert.deepEqual(parse(Uint8Array.of(0xef, 0xbb, 0xbf), "data: a\n\n"), [["message", "a"]]);
  const parser = new SseParser();
  assert.deepEqual(
    parser.feed("\ufeffdata: a\n\n\ufeffdata: b\n\n").map((m) => m.data),
    ["a"],
  );
});

test("an unterminated event at the end is discarded; invalid UTF-8 is replaced", () => {
  assert.deepEqual(parse("data: a\n\ndata: b\n"), [["message", "a"]]);
  assert.deepEqual(parse("data: a\n\ndata: b"), [["message", "a"]]);
  assert.deepEqual(parse(Uint8Array.of(0x64, 0x61, 0x74, 0x61, 0x3a, 0x20, 0xff, 0x0a, 0x0a)), [["message", "\ufffd"]]);
});

test("decodeEvent: update, lagged, unknown names", () => {
  const update = decodeEvent({ event: "update", data: JSON.stringify({ ...UPDATE, futureField: 1 }), id: "" });
  assert.ok(update instanceof Update);
  assert.equal(update.atEpochMs, 2000);
  assert.equal(update.count(), 4);
  assert.equal(update.count("p", "admitted"), 3);
  assert.equal(update.count(undefined, "queue-full"), 1);
  assert.deepEqual(update.principals, []);
  assert.equal(update.profileChange, undefined);
  assert.deepEqual(update.lane("p")?.requests, { available: 9, capacity: 10 });
  assert.equal((update.data as unknown as Record<string, unknown>).futureField, 1);
  assert.deepEqual(decodeEvent({ event: "lagged", data: '{"missed": 12}', id: "" }), new Lagged(12));
  assert.equal(decodeEvent({ event: "message", data: "anything", id: "" }), undefined);
  assert.equal(decodeEvent({ event: "snapshot", data: "{}", id: "" }), undefined);
});

test("a known event with bad data is an invalid-response ApiError", () => {
  for (const [event, data] of [
    ["update", "not json"],
    ["update", "[1]"],
    ["lagged", '{"missed": "3"}'],
    ["lagged", "{}"],
    ["update", JSON.stringify({ ...UPDATE, lanes: 1 })],
    ["update", JSON.stringify({ ...UPDATE, principals: {} })],
    ["update", JSON.stringify({ ...UPDATE, atEpochMs: undefined })],
  ] as const) {
    assert.throws(
      () => decodeEvent({ event, data, id: "" }),
      (error: unknown) => error instanceof ApiError && error.error === "invalid-response",
    );
  }
});

// The stream, through a fake fetch.

const FRAMES = [
  ": connected\r\n\r\n",
  `event: update\r\ndata: ${JSON.stringify(UPDATE).slice(0, 20)}`,
  `${JSON.stringify(UPDATE).slice(20)}\r`,
  "\n\r\nevent: hello-from-the-future\ndata: {}\n\n",
  'event: lagged\ndata: {"missed": 5}\n\n',
  "event: update\ndata: ",
  '{"atEpochMs": 3000, "sinceEpochMs": 2000, "lanes": [], "decisions": [], "transitions": [],\n',
  'data: "pauses": [], "dropped": 0, "principals": [{"principalId": "a", "grants": 1, "queueDelayMs": 0}]}\n\n',
  "event: update\ndata: {}\n", // unterminated: discarded
];

interface Seen {
  url: string;
  headers: Record<string, string>;
  signal: AbortSignal | undefined;
}

/** A fetch answering like the service; `hang` keeps the body open after the frames. */
function fakeFetch(seen: Seen[], options: { hang?: boolean; cut?: boolean } = {}): typeof fetch {
  return (async (input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(String(input));
    seen.push({ url: String(input), headers: { ...(init?.headers as Record<string, string>) }, signal: init?.signal ?? undefined });
    const workspace = url.pathname.split("/")[3];
    const json = { "content-type": "application/json" };
    if (workspace === "missing") return new Response('{"error":"no-profile","message":"no profile"}', { status: 404, headers: json });
    if (workspace === "other") return new Response('{"error":"forbidden","message":"not yours"}', { status: 403, headers: json });
    if (workspace === "html") return new Response("<p>", { status: 200, headers: { "content-type": "text/html" } });
    const signal = init?.signal;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const frame of FRAMES) controller.enqueue(bytes(frame));
        signal?.addEventListener("abort", () => controller.error(signal.reason));
        if (options.cut) controller.error(new TypeError("terminated"));
        else if (!options.hang) controller.close();
      },
    });
    return new Response(body, { status: 200, headers: { "content-type": "text/event-stream; charset=utf-8" } });
  }) as typeof fetch;
}

test("the stream parses, skips unknown events and maps errors", async () => {
  const seen: Seen[] = [];
  const client = new Client({ baseUrl: "http://turnstile.test", key: "tsk_x", fetch: fakeFetch(seen) });
  const got: FeedEvent[] = [];
  for await (const event of client.events("ws", { maxEvents: 7 })) got.push(event);
  assert.deepEqual(
    got.map((e) => e.constructor),
    [Update, Lagged, Update],
  );
  const [first, lagged, last] = got;
  assert.ok(first instanceof Update && first.count("p") === 4);
  assert.deepEqual(lagged, new Lagged(5));
  assert.ok(last instanceof Update && last.principals[0]?.principalId === "a");
  assert.equal(seen[0]?.url, "http://turnstile.test/v1/workspaces/ws/events?maxEvents=7");
  assert.equal(seen[0]?.headers.accept, "text/event-stream");
  assert.equal(seen[0]?.headers.authorization, "Bearer tsk_x");
  await assert.rejects(client.events("missing").next(), NotFoundError);
  await assert.rejects(client.events("other").next(), ForbiddenError);
  await assert.rejects(client.events("html").next(), (e: unknown) => e instanceof ApiError && e.error === "invalid-response");
});

test("a stream cut mid-way is UnavailableError unreachable", async () => {
  const client = new Client({ baseUrl: "http://turnstile.test", key: "tsk_x", fetch: fakeFetch([], { cut: true }) });
  const events = client.events("ws");
  await assert.rejects(
    (async () => {
      for await (const _ of events) {
        // the frames before the cut
      }
    })(),
    (e: unknown) => e instanceof UnavailableError && e.error === "unreachable" && e.status === undefined,
  );
});

test("a silent service times out as UnavailableError timeout, a slow consumer does not", async () => {
  const client = new Client({ baseUrl: "http://turnstile.test", key: "tsk_x", timeoutMs: 200, fetch: fakeFetch([], { hang: true }) });
  const events = client.events("ws");
  assert.ok((await events.next()).value instanceof Update);
  // The consumer takes longer than the timeout between two events: not the service's silence.
  await new Promise((done) => setTimeout(done, 400));
  assert.ok((await events.next()).value instanceof Lagged);
  assert.ok((await events.next()).value instanceof Update);
  await assert.rejects(events.next(), (e: unknown) => e instanceof UnavailableError && e.error === "timeout");
});

test("leaving the loop early aborts the request (the connection is closed)", async () => {
  const seen: Seen[] = [];
  const client = new Client({ baseUrl: "http://turnstile.test", key: "tsk_x", fetch: fakeFetch(seen, { hang: true }) });
  for await (const event of client.events("ws")) {
    assert.ok(event instanceof Update);
    assert.equal(seen[0]?.signal?.aborted, false);
    break;
  }
  assert.equal(seen[0]?.signal?.aborted, true);
});
