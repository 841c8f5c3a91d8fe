/** The README's example runs verbatim against the service (with the demo principal key). */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { type Service, startService } from "./server.js";

const here = dirname(fileURLToPath(import.meta.url));
const readme = readFileSync(join(here, "..", "README.md"), "utf8");
const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1] ?? "");

let service: Service;
before(async () => {
  service = await startService();
});
after(async () => {
  await service?.stop();
});

test("the README examples run verbatim", async () => {
  assert.equal(blocks.length, 2);
  for (const [index, block] of blocks.entries()) {
    // Inside the package directory, so that `import "turnstile-client"` resolves to dist/.
    const file = join(here, `readme-example-${index}.mjs`);
    writeFileSync(file, block);
    const { stdout } = await promisify(execFile)(process.execPath, [file], {
      env: { ...process.env, TURNSTILE_URL: service.baseUrl, TURNSTILE_KEY: service.demoKey },
      timeout: 60_000,
    });
    if (block.includes(".events(")) {
      const lines = stdout.trim().split("\n");
      assert.equal(lines.length, 3, stdout);
      for (const line of lines) assert.match(line, /^llm-subagent: \d+ active, \d+ queued, \d+ admitted$/);
    } else {
      assert.equal(stdout.trim(), "answer: ...");
    }
  }
});
