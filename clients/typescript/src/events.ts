/**
 * The live event feed of a workspace (`GET /v1/workspaces/{workspaceId}/events`).
 *
 * The service answers with server-sent events (`text/event-stream`). `SseParser` reads that
 * format as the HTML standard defines it (the parser of `EventSource`): lines end with LF,
 * CRLF or CR; the `data:` lines of one event are joined with LF; `event:` names the event
 * (default `message`); `id:` and `retry:` are read and kept; lines starting with `:` are
 * comments (heartbeats); an event is dispatched at a blank line, and one without `data` is
 * not; a leading byte-order mark is dropped; an unterminated line or event at the end of the
 * stream is discarded.
 *
 * `decodeEvent` turns an `update` event into an `Update` and a `lagged` event into a `Lagged`.
 * Events of any other name are skipped, as `EventSource` skips events nobody listens to: a
 * service that gains a new kind of event does not break code written for today's two. A known
 * event whose data is not the expected JSON object throws `ApiError` (`invalid-response`).
 */
import { ApiError } from "./errors.js";
import type {
  BreakerTransition,
  DecisionCount,
  FeedPause,
  FeedProfileChange,
  FeedUpdate,
  LaneView,
  PrincipalTally,
} from "./types.js";

/** The largest `maxEvents` the service accepts. */
export const MAX_EVENTS = 100_000;

/** One dispatched server-sent event, before its data is interpreted. */
export interface SseMessage {
  event: string;
  data: string;
  /** The last event ID seen so far in the stream (the service sends none today). */
  id: string;
}

/**
 * An incremental `text/event-stream` parser: `feed(bytes or text)` returns the events those
 * bytes complete; `close()` ends the stream, discarding what no blank line ended.
 */
export class SseParser {
  /** The reconnection time the stream last asked for (`retry:`), if any. */
  retryMs: number | undefined = undefined;
  #decoder = new TextDecoder("utf-8");
  #line = "";
  #afterCr = false;
  #started = false;
  #event = "";
  #data: string[] = [];
  #id = "";

  feed(chunk: Uint8Array | string): SseMessage[] {
    let text = typeof chunk === "string" ? chunk : this.#decoder.decode(chunk, { stream: true });
    if (!this.#started && text !== "") {
      this.#started = true;
      // TextDecoder drops a byte-order mark already; text fed as a string may still have one.
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    const messages: SseMessage[] = [];
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const char = text.charCodeAt(i);
      if (char === 10 && this.#afterCr) {
        // The LF of a CRLF whose CR ended the line already.
        this.#afterCr = false;
        start = i + 1;
        continue;
      }
      this.#afterCr = false;
      if (char === 13 || char === 10) {
        const line = this.#line + text.slice(start, i);
        this.#line = "";
        this.#afterCr = char === 13;
        start = i + 1;
        const message = this.#process(line);
        if (message !== undefined) messages.push(message);
      }
    }
    if (start < text.length) this.#line += text.slice(start);
    return messages;
  }

  /** End of stream: an unterminated line or event is discarded (as `EventSource` does). */
  close(): void {
    this.#decoder.decode();
    this.#line = "";
    this.#afterCr = false;
    this.#event = "";
    this.#data = [];
  }

  #process(line: string): SseMessage | undefined {
    if (line === "") return this.#dispatch();
    if (line.startsWith(":")) return undefined; // a comment (a heartbeat, say)
    const colon = line.indexOf(":");
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") this.#event = value;
    else if (name === "data") this.#data.push(value);
    else if (name === "id") {
      if (!value.includes("\0")) this.#id = value;
    } else if (name === "retry") {
      if (/^[0-9]+$/.test(value)) this.retryMs = Number(value);
    }
    // Any other field is ignored.
    return undefined;
  }

  #dispatch(): SseMessage | undefined {
    if (this.#data.length === 0) {
      this.#event = "";
      return undefined;
    }
    const message = { event: this.#event || "message", data: this.#data.join("\n"), id: this.#id };
    this.#event = "";
    this.#data = [];
    return message;
  }
}

/**
 * An `update` event: the workspace's lanes now, and what happened since the last update.
 * `data` is the event's JSON as sent (fields this client does not know yet included); the
 * getters read it. Every update carries the full lane state, so a subscriber that lagged or
 * reconnected is up to date again with the next one.
 */
export class Update {
  readonly event = "update" as const;
  constructor(readonly data: FeedUpdate) {}
  /** The service's clock when the update was made. */
  get atEpochMs(): number {
    return this.data.atEpochMs;
  }
  /** The counts cover `(sinceEpochMs, atEpochMs]`. */
  get sinceEpochMs(): number {
    return this.data.sinceEpochMs;
  }
  get lanes(): LaneView[] {
    return this.data.lanes;
  }
  /** Final admission answers by provider lane and reason (`admitted` or a refusal). */
  get decisions(): DecisionCount[] {
    return this.data.decisions;
  }
  get transitions(): BreakerTransition[] {
    return this.data.transitions;
  }
  get pauses(): FeedPause[] {
    return this.data.pauses;
  }
  /** Grants and summed queue delay per principal: admin keys only (empty for a principal key). */
  get principals(): PrincipalTally[] {
    return this.data.principals ?? [];
  }
  get profileChange(): FeedProfileChange | undefined {
    return this.data.profileChange;
  }
  /** Transitions and pauses left out of this update (more than 64 in one flush). */
  get dropped(): number {
    return this.data.dropped;
  }
  /** The lane of this provider, or undefined if the profile has no such lane. */
  lane(providerId: string): LaneView | undefined {
    return this.data.lanes.find((lane) => lane.providerId === providerId);
  }
  /** Decisions in this update, of one provider lane and / or one reason (undefined: all). */
  count(providerId?: string, reason?: string): number {
    let total = 0;
    for (const d of this.data.decisions) {
      if ((providerId === undefined || d.providerId === providerId) && (reason === undefined || d.reason === reason)) {
        total += d.count;
      }
    }
    return total;
  }
}

/** A `lagged` event: this subscriber fell behind and `missed` updates were dropped for it.
 * The stream goes on; the next `Update` carries the full lane state again. */
export class Lagged {
  readonly event = "lagged" as const;
  constructor(readonly missed: number) {}
}

/** What `client.events()` yields. */
export type FeedEvent = Update | Lagged;

function invalid(message: string): ApiError {
  return new ApiError(200, { error: "invalid-response", message });
}

function isInt(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value);
}

/** The typed event, or undefined for an event of another name (skipped). */
export function decodeEvent(message: SseMessage): FeedEvent | undefined {
  if (message.event !== "update" && message.event !== "lagged") return undefined;
  let body: unknown;
  try {
    body = JSON.parse(message.data);
  } catch {
    throw invalid(`the data of a ${message.event} event is not JSON`);
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw invalid(`the data of a ${message.event} event is not a JSON object`);
  }
  const record = body as Record<string, unknown>;
  if (message.event === "lagged") {
    if (!isInt(record.missed)) throw invalid("the lagged event's missed is not an integer");
    return new Lagged(record.missed);
  }
  for (const key of ["atEpochMs", "sinceEpochMs", "dropped"]) {
    if (!isInt(record[key])) throw invalid(`the update's ${key} is not an integer`);
  }
  for (const key of ["lanes", "decisions", "transitions", "pauses"]) {
    if (!Array.isArray(record[key])) throw invalid(`the update's ${key} is not an array`);
  }
  if (record.principals !== undefined && !Array.isArray(record.principals)) {
    throw invalid("the update's principals is not an array");
  }
  return new Update(record as unknown as FeedUpdate);
}

export function checkMaxEvents(maxEvents: number | undefined): void {
  if (maxEvents === undefined) return;
  if (!Number.isSafeInteger(maxEvents) || maxEvents < 1 || maxEvents > MAX_EVENTS) {
    throw new RangeError(`maxEvents must be an integer in 1..${MAX_EVENTS}`);
  }
}
