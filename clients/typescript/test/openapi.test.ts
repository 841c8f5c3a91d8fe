/**
 * The client follows `crates/server/openapi.json`: every operation, every request and response
 * field (recursively), every enum value, in both directions. (That each shape in `SHAPES`
 * names exactly the keys of its TypeScript interface is checked by the compiler.)
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { Client, ENUMS, OPERATIONS, REQUIRED, SHAPES } from "turnstile-client";

import { REPO } from "./server.js";

type Schema = Record<string, any>;
type Doc = Schema;
const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];
const shapes = SHAPES as Record<string, Record<string, string>>;
const required = REQUIRED as Record<string, readonly string[]>;

function load(): Doc {
  return JSON.parse(readFileSync(join(REPO, "crates", "server", "openapi.json"), "utf8")) as Doc;
}

function resolve(doc: Doc, schema: Schema): Schema {
  for (;;) {
    if (typeof schema.$ref === "string") {
      schema = doc.components.schemas[schema.$ref.split("/").pop() ?? ""];
    } else if (Array.isArray(schema.allOf)) {
      // A named schema narrowed by constraints (`not`, bounds): its fields are the named one's.
      schema = schema.allOf.find((s: Schema) => s.$ref !== undefined || s.properties !== undefined);
    } else {
      return schema;
    }
  }
}

function compare(doc: Doc, raw: Schema, kind: string, where: string, problems: string[]): void {
  const schema = resolve(doc, raw);
  if (Array.isArray(schema.oneOf)) {
    // Each variant must be one of the client's alternatives ("A|B").
    const alternatives = kind.split("|");
    for (const variant of schema.oneOf as Schema[]) {
      if (variant.type === "null") continue; // nullability is the interface's (the compiler's) business
      if (variant.$ref === undefined) {
        compare(doc, variant, kind, where, problems); // an inline object
        continue;
      }
      const name = String(variant.$ref ?? "").split("/").pop() ?? "";
      const match = alternatives.find((a) => a.replace(/Body$/, "") === name);
      if (match === undefined) problems.push(`${where}: variant ${name} unknown to the client (${kind})`);
      else compare(doc, variant, match, where, problems);
    }
    return;
  }
  if (schema.properties) {
    const fields = shapes[kind];
    if (fields === undefined) {
      problems.push(`${where}: the document has an object with fields, the client has ${kind}`);
      return;
    }
    const documented = Object.keys(schema.properties);
    for (const name of documented.filter((n) => !(n in fields))) {
      problems.push(`${where}.${name}: in the OpenAPI document, unknown to the client (${kind})`);
    }
    for (const name of Object.keys(fields).filter((n) => !documented.includes(n))) {
      problems.push(`${where}.${name}: known to the client (${kind}), not in the OpenAPI document`);
    }
    if (where.endsWith("request")) {
      const want = [...(schema.required ?? [])].sort();
      const have = [...(required[kind] ?? [])].sort();
      if (JSON.stringify(want) !== JSON.stringify(have)) {
        problems.push(`${where}: required ${JSON.stringify(want)} in the document, client has ${JSON.stringify(have)}`);
      }
    }
    for (const name of documented.filter((n) => n in fields)) {
      compare(doc, schema.properties[name], fields[name]!, `${where}.${name}`, problems);
    }
    return;
  }
  if (schema.items) {
    if (!kind.endsWith("[]")) problems.push(`${where}: the document has an array, the client has ${kind}`);
    else compare(doc, schema.items, kind.slice(0, -2), `${where}[]`, problems);
    return;
  }
  if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
    if (!kind.startsWith("{")) problems.push(`${where}: the document has a map, the client has ${kind}`);
    else compare(doc, schema.additionalProperties, kind.slice(1, -1), `${where}{}`, problems);
    return;
  }
  const values: string[] | undefined = schema.enum ?? (schema.const !== undefined ? [schema.const] : undefined);
  if (values !== undefined) {
    if (!kind.startsWith("enum:")) {
      if (schema.const !== undefined && kind === "const") return;
      problems.push(`${where}: the document has an enum, the client has ${kind}`);
      return;
    }
    const known = ENUMS[kind.slice(5)] ?? [];
    for (const v of values.filter((v) => !known.includes(v))) problems.push(`${where}: value ${v} in the document, unknown to the client`);
    for (const v of known.filter((v) => !values.includes(v))) problems.push(`${where}: value ${v} known to the client, not in the document`);
  }
}

/**
 * A `text/event-stream` answer: the event names its description gives (`event: NAME`) are the
 * client's, and each event's data is compared with the schema of the same name as the client's
 * shape (`FeedUpdate`), where the document has one.
 */
function eventProblems(doc: Doc, response: Schema, events: Record<string, string> | undefined, where: string, problems: string[]): void {
  if (events === undefined) {
    problems.push(`${where}: an event stream, the client does not read it as one`);
    return;
  }
  const named = new Set([...String(response.description ?? "").matchAll(/`event: ([A-Za-z0-9_-]+)`/g)].map((m) => m[1] ?? ""));
  for (const name of [...named].filter((n) => !(n in events))) problems.push(`${where}: event ${name} in the document, unknown to the client`);
  for (const name of Object.keys(events).filter((n) => !named.has(n))) problems.push(`${where}: event ${name} known to the client, not in the document`);
  for (const [name, shape] of Object.entries(events)) {
    if (doc.components.schemas[shape] !== undefined) {
      compare(doc, { $ref: `#/components/schemas/${shape}` }, shape, `${where} ${name}`, problems);
    } else if (name === "update") {
      problems.push(`${where}: no schema ${shape} for the data of ${name} events`);
    }
  }
}

function problemsOf(doc: Doc): string[] {
  const problems: string[] = [];
  const documented = new Set<string>();
  for (const [path, item] of Object.entries(doc.paths as Record<string, Schema>)) {
    for (const [method, op] of Object.entries(item)) {
      if (!METHODS.includes(method)) continue;
      // The console's page and assets (docs/console.md), for a browser, and the proxy routes
      // (docs/proxy.md), for the providers' own SDKs: not the clients'.
      if ((op as Schema)["x-console"] === true && !path.startsWith("/v1/")) continue;
      if ((op as Schema)["x-proxy"] === true) continue;
      const key = `${method.toUpperCase()} ${path}`;
      documented.add(key);
      const known = OPERATIONS[key];
      if (known === undefined) {
        problems.push(`${key}: operation ${op.operationId} unknown to the client`);
        continue;
      }
      if (typeof (Client.prototype as unknown as Record<string, unknown>)[known.method] !== "function") {
        problems.push(`${key}: Client.${known.method} missing`);
      }
      const body = op.requestBody?.content?.["application/json"];
      if (body === undefined && known.request !== null) problems.push(`${key}: the client sends a body the document does not have`);
      if (body !== undefined) {
        if (known.request === null) problems.push(`${key}: request body unknown to the client`);
        else compare(doc, body.schema, known.request, `${key} request`, problems);
      }
      const statuses = Object.keys(op.responses ?? {}).map(Number);
      for (const status of statuses) {
        const kind = known.responses[status];
        if (kind === undefined) {
          problems.push(`${key}: status ${status} unknown to the client`);
          continue;
        }
        for (const [media, content] of Object.entries(op.responses[String(status)].content ?? {}) as [string, Schema][]) {
          if (media === "application/json") compare(doc, content.schema, kind, `${key} ${status}`, problems);
          else if (media === "text/event-stream") {
            eventProblems(doc, op.responses[String(status)], known.events, `${key} ${status}`, problems);
          } else if (kind !== "text") problems.push(`${key} ${status}: ${media} answer, the client expects JSON`);
        }
      }
      for (const status of Object.keys(known.responses).map(Number).filter((s) => !statuses.includes(s))) {
        problems.push(`${key}: the client handles status ${status}, not in the document`);
      }
    }
  }
  for (const key of Object.keys(OPERATIONS).filter((k) => !documented.has(k))) {
    problems.push(`${key}: known to the client, not in the OpenAPI document`);
  }
  return problems;
}

test("the client knows every operation and field of the OpenAPI document", () => {
  const problems = problemsOf(load());
  assert.deepEqual(problems, [], `the client and crates/server/openapi.json disagree:\n${problems.join("\n")}`);
});

test("the comparison fails when the document gains an operation, a field or a value", () => {
  const cases: [string, (doc: Doc) => void][] = [
    ["extend", (d) => (d.paths["/v1/leases/{leaseId}/extend"] = { post: { operationId: "extend", responses: {} } })],
    ["evidence.queuePosition", (d) => (d.components.schemas.Evidence.properties.queuePosition = { type: "integer" })],
    [
      "actualUsage.requestBytes",
      (d) => (d.components.schemas.ReleaseRequest.properties.actualUsage.properties.requestBytes = { type: "integer" }),
    ],
    ["estimate.imageCount", (d) => (d.components.schemas.Estimate.properties.imageCount = { type: "integer" })],
    ["maintenance", (d) => d.components.schemas.Rejection.properties.reason.enum.push("maintenance")],
    ["status 418", (d) => (d.paths["/v1/admissions"].post.responses["418"] = { description: "teapot" })],
    ["ttlMs", (d) => delete d.components.schemas.Lease.properties.ttlMs],
    ["required", (d) => d.components.schemas.AdmissionRequest.required.push("deadlineMs")],
    ["update.queueDepth", (d) => (d.components.schemas.FeedUpdate.properties.queueDepth = { type: "integer" })],
    ["lanes[].retryPressure", (d) => (d.components.schemas.LaneView.properties.retryPressure = { type: "integer" })],
    [
      "tokens.refillPerSecond",
      (d) => (d.components.schemas.LaneView.properties.tokens.oneOf[1].properties.refillPerSecond = { type: "integer" }),
    ],
    [
      "event snapshot",
      (d) => (d.paths["/v1/workspaces/{workspaceId}/events"].get.responses["200"].description += ", or `event: snapshot`"),
    ],
    ["forced-open", (d) => d.components.schemas.LaneView.properties.breakerState.enum.push("forced-open")],
  ];
  for (const [needle, change] of cases) {
    const doc = load();
    change(doc);
    const problems = problemsOf(doc);
    assert.ok(problems.some((p) => p.includes(needle)), `${needle} not detected: ${JSON.stringify(problems)}`);
  }
});
