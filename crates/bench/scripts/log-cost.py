#!/usr/bin/env python3
"""The logging cost at the default level (issue 35; docs/performance.md). Run from the
repository root after `cargo build --release -p turnstile -p turnstile-bench`. One release `turnstile serve` per mode
(default `info` vs `RUST_LOG=off`), alternating, `turnstile-bench serve --url` saturation."""
import json, os, subprocess, statistics, sys, tempfile, urllib.request
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
BIN = os.environ.get("TURNSTILE_BIN", "target/release/turnstile")
BENCH = os.environ.get("TURNSTILE_BENCH_BIN", "target/release/turnstile-bench")
PROFILE = {"workspace": {"concurrency": 4096, "maxQueueLength": 100000},
           "providers": {"bench-provider": {"concurrency": 4096}},
           "principals": {"bench": {"concurrency": 4096}}}
def start(env_extra):
    d = tempfile.mkdtemp()
    env = dict(os.environ); env.pop("RUST_LOG", None); env.update(env_extra)
    p = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--data", d + "/data"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    base = admin = None
    for line in p.stdout:
        if line.startswith("turnstile serve: listening on "): base = line.split()[-1]
        if line.strip().startswith("admin key:"): admin = line.split()[-1]
        if line.startswith("Lost the admin key"): break
    def call(method, path, body, key):
        req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode(),
              headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req).read() or b"{}")
    call("PUT", "/v1/workspaces/bench/profiles/v1", PROFILE, admin)
    key = call("POST", "/v1/workspaces/bench/keys", {"principalId": "bench"}, admin)["key"]
    return p, base, key
sides = {"info": start({}), "off": start({"RUST_LOG": "off"})}
res = {s: [] for s in sides}
for r in range(ROUNDS):
    for side in (["info", "off"] if r % 2 == 0 else ["off", "info"]):
        _, base, key = sides[side]
        out = subprocess.run([BENCH, "serve", "--url", base, "--key", key, "--provider", "bench-provider",
                              "--seconds", "3", "--json"], capture_output=True, text=True, timeout=120)
        v = json.loads(out.stdout)["pairsPerSecond"]
        res[side].append(v); print(r, side, round(v), flush=True)
for p, _, _ in sides.values(): p.terminate()
a, b = statistics.median(res["info"]), statistics.median(res["off"])
print(f"info {a:.0f} [{min(res['info']):.0f}..{max(res['info']):.0f}]  off {b:.0f} [{min(res['off']):.0f}..{max(res['off']):.0f}]  ratio {a/b:.4f}")
