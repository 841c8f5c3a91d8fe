#!/usr/bin/env bash
# The service alone: one `turnstile serve` process and a `bench-serve --url` load generator in
# another process on the same machine, so the service's own CPU per acquire + release pair can
# be read from /proc (the in-process `bench-serve` cannot tell its load generator's CPU from
# the service's). Prints the generator's report and the service process's CPU per pair.
#
#   crates/cli/bench/service-alone.sh [path/to/turnstile serve] [path/to/turnstile bench-serve] [seconds] [pairs/s]
#
# Without the fourth argument the generator runs a closed loop (saturation). Figures:
# docs/performance.md.
set -euo pipefail
serve_bin="${1:-target/release/turnstile}"
gen_bin="${2:-$serve_bin}"
seconds="${3:-6}"
rate_args=()
if [ -n "${4:-}" ]; then rate_args=(--rate "$4"); fi
work="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
printf 'demo = false\n' > "$work/turnstile.toml"
"$serve_bin" serve --listen 127.0.0.1:0 --data "$work/data" --config "$work/turnstile.toml" > "$work/out" 2>&1 &
pid=$!
until grep -q "admin key:" "$work/out" 2>/dev/null; do sleep 0.05; done
url="http://$(sed -n 's/^turnstile serve: listening on http:\/\///p' "$work/out" | head -1)"
admin="$(sed -n 's/^ *admin key: *//p' "$work/out" | head -1)"
profile='{"workspace":{"concurrency":4096,"maxQueueLength":100000},"providers":{"bench-provider":{"concurrency":4096}},"principals":{"bench":{"concurrency":4096}}}'
curl -sf -X PUT "$url/v1/workspaces/bench/profiles/bench-v1" -H "Authorization: Bearer $admin" \
  -H 'Content-Type: application/json' -d "$profile" >/dev/null
key="$(curl -sf -X POST "$url/v1/workspaces/bench/keys" -H "Authorization: Bearer $admin" \
  -H 'Content-Type: application/json' -d '{"principalId":"bench"}' | jq -r .key)"
# utime + stime of the service process, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
before=$(ticks)
"$gen_bin" bench-serve --url "$url" --key "$key" --provider bench-provider \
  --seconds "$seconds" "${rate_args[@]}" --json > "$work/bench.json"
after=$(ticks)
jq -c '{pairs, pairsPerSecond, failures, pairP50: .pairLatency.p50Ms, pairP99: .pairLatency.p99Ms, pairMax: .pairLatency.maxMs, requestP99: .requestLatency.p99Ms, wallSeconds, generatorCpuSeconds: .processCpuSeconds}' "$work/bench.json"
wall=$(jq .wallSeconds "$work/bench.json")
pairs_all=$(jq "(.pairsPerSecond * $wall) | floor" "$work/bench.json")
# Pairs over the whole run (warm-up included) estimated as the measured rate times the wall
# time: right when the generator kept its rate, too high when it fell behind (then the wall
# time grows past warm-up + measurement and the per-pair figure comes out too low).
echo "service CPU: $(echo "($after - $before) / $hz" | bc -l | cut -c1-6) s over the run (warm-up included), about $(echo "($after - $before) * 1000000 / $hz / $pairs_all" | bc -l | cut -d. -f1) µs per pair (valid only if the run kept its rate)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
