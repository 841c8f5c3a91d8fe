#!/usr/bin/env python3
"""The cost of a shadow rollout on the admission path (issue 33; docs/performance.md). Run from
the repository root after `cargo build --release -p turnstile -p turnstile-bench`. Two release
`turnstile serve` processes, one with a shadow rollout running (candidate: workspace
concurrency 32 against 4096), one without; alternating `turnstile-bench serve --url`
saturation rounds; prints the shadow's comparison and the median ratio."""
import json, os, subprocess, statistics, sys, tempfile, urllib.request
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
BIN = os.environ.get("TURNSTILE_BIN", "target/release/turnstile")
BENCH = os.environ.get("TURNSTILE_BENCH_BIN", "target/release/turnstile-bench")
PROFILE = {"workspace": {"concurrency": 4096, "maxQueueLength": 100000},
           "providers": {"bench-provider": {"concurrency": 4096}},
           "principals": {"bench": {"concurrency": 4096}}}
CANDIDATE = {"workspace": {"concurrency": 32, "maxQueueLength": 100000},
             "providers": {"bench-provider": {"concurrency": 4096}},
             "principals": {"bench": {"concurrency": 4096}}}
def start(shadow):
    d = tempfile.mkdtemp()
    env = dict(os.environ); env.pop("RUST_LOG", None)
    p = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--data", d + "/data"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    base = admin = None
    for line in p.stdout:
        if line.startswith("turnstile serve: listening on "): base = line.split()[-1]
        if line.strip().startswith("admin key:"): admin = line.split()[-1]
        if line.startswith("Lost the admin key"): break
    def call(method, path, body, key=admin):
        req = urllib.request.Request(base + path, method=method,
              data=None if body is None else json.dumps(body).encode(),
              headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req).read() or b"{}")
    call("PUT", "/v1/workspaces/bench/profiles/v1", PROFILE)
    key = call("POST", "/v1/workspaces/bench/keys", {"principalId": "bench"})["key"]
    if shadow:
        call("POST", "/v1/workspaces/bench/rollouts", {"revision": "v2", "profile": CANDIDATE, "mode": "shadow"})
    return p, base, key, call
sides = {"shadow": start(True), "none": start(False)}
res = {s: [] for s in sides}
for r in range(ROUNDS):
    for side in (["shadow", "none"] if r % 2 == 0 else ["none", "shadow"]):
        _, base, key, _ = sides[side]
        out = subprocess.run([BENCH, "serve", "--url", base, "--key", key, "--provider", "bench-provider",
                              "--seconds", "3", "--json"], capture_output=True, text=True, timeout=120)
        v = json.loads(out.stdout)["pairsPerSecond"]
        res[side].append(v); print(r, side, round(v), flush=True)
print(json.dumps(sides["shadow"][3]("GET", "/v1/workspaces/bench/rollouts/current", None)["decisions"]))
for p, _, _, _ in sides.values(): p.terminate()
a, b = statistics.median(res["shadow"]), statistics.median(res["none"])
print(f"shadow {a:.0f} [{min(res['shadow']):.0f}..{max(res['shadow']):.0f}]  none {b:.0f} [{min(res['none']):.0f}..{max(res['none']):.0f}]  ratio {a/b:.4f}")
