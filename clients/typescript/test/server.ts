/**
 * One real `turnstile serve` per test file.
 *
 * The binary comes from `TURNSTILE_BIN` (default `target/debug/turnstile` at the repository
 * root; build it with `cargo build -p turnstile`). A missing binary fails: nothing skips. The
 * service gets a temporary data directory, a free port (`--listen 127.0.0.1:0`, read from its
 * banner) and a config file with a short lease TTL, so that heartbeats matter within a test.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { Client, type Limits, type Profile } from "turnstile-client";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const TTL_MS = 1000;
export const WORKSPACE = "clients";
export const PRINCIPAL = "ts";

const lane = (extra: Partial<Limits> = {}): Limits => ({
  concurrency: 4,
  requestsPerMinute: 6000,
  tokensPerSecond: 100000,
  ...extra,
});
const breaker = { circuitBreaker: { failureThreshold: 1, openMs: 60000, halfOpenMaxCalls: 1 } };

/** One lane per scenario, so that a breaker or pause opened by one test changes no other. */
export const PROFILE: Profile = {
  workspace: { concurrency: 64, requestsPerMinute: 60000, tokensPerSecond: 1000000, minShare: { standard: 0.25, batch: 0.1 } },
  providers: {
    steady: lane({ tokensPerSecond: 1000 }),
    solo: lane({ concurrency: 1 }),
    expiry: lane(),
    fragile: lane(breaker),
    "abort-lane": lane(breaker),
    pausable: lane(),
    headers: lane(),
    events: lane(),
    // Token-fair turns (issue 31): the fairness answer names the lane's mode.
    fair: lane({ fairness: "tokens" }),
  },
  principals: {
    [PRINCIPAL]: {
      concurrency: 32,
      requestsPerMinute: 60000,
      maxCostUsd: 1000,
      allowUnknownCost: true,
      weight: 2,
      priority: "interactive",
    },
  },
};

export interface Service {
  baseUrl: string;
  adminKey: string;
  demoKey: string;
  /** A principal key of workspace `clients` (profile `PROFILE`). */
  key: string;
  stop(): Promise<void>;
}

export function turnstileBin(): string {
  const configured = process.env.TURNSTILE_BIN ?? join("target", "debug", "turnstile");
  const path = isAbsolute(configured) ? configured : join(REPO, configured);
  if (!existsSync(path)) {
    throw new Error(`turnstile binary not found at ${path}: run \`cargo build -p turnstile\` or set TURNSTILE_BIN`);
  }
  return path;
}

export async function startService(): Promise<Service> {
  const root = mkdtempSync(join(tmpdir(), "turnstile-ts-"));
  const config = join(root, "turnstile.toml");
  writeFileSync(config, `[leases]\nttl_ms = ${TTL_MS}\n`);
  const child: ChildProcess = spawn(
    turnstileBin(),
    ["serve", "--listen", "127.0.0.1:0", "--data", join(root, "data"), "--config", config],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const banner: string[] = [];
  child.stderr?.on("data", (chunk: Buffer) => banner.push(chunk.toString()));
  const found = await new Promise<{ base: string; admin: string; demo: string }>((done, fail) => {
    let base: string | undefined;
    let admin: string | undefined;
    const timer = setTimeout(() => fail(new Error(`turnstile serve printed no banner:\n${banner.join("")}`)), 30_000);
    const lines = createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      banner.push(line + "\n");
      base ??= /listening on (http:\/\/\S+)/.exec(line)?.[1];
      admin ??= /\b(tsa_[0-9A-Za-z_-]+)/.exec(line)?.[1];
      const demo = /\b(tsk_[0-9A-Za-z_-]+)/.exec(line)?.[1];
      if (demo !== undefined && base !== undefined && admin !== undefined) {
        clearTimeout(timer);
        lines.removeAllListeners("line");
        child.stdout?.resume();
        done({ base, admin, demo });
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`turnstile serve exited (${code}):\n${banner.join("")}`));
    });
  });
  const stop = async (): Promise<void> => {
    if (child.exitCode === null) child.kill("SIGTERM");
    await exited;
    rmSync(root, { recursive: true, force: true });
  };
  try {
    const admin = new Client({ baseUrl: found.base, key: found.admin });
    await admin.registerProfile(WORKSPACE, "v1", PROFILE);
    const { key } = await admin.createKey(WORKSPACE, PRINCIPAL);
    return { baseUrl: found.base, adminKey: found.admin, demoKey: found.demo, key, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The value of an unlabelled Prometheus series. */
export function metric(text: string, name: string): number {
  for (const line of text.split("\n")) {
    const parts = line.trim().split(/\s+/);
    if (parts.length === 2 && parts[0] === name) return Number(parts[1]);
  }
  throw new Error(`metric ${name} not in /metrics`);
}

let counter = 0;
export function budget(): string {
  counter += 1;
  return `inv-ts-${process.pid}-${Date.now()}-${counter}`;
}

export const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));
