#!/usr/bin/env bash
# The service alone: one `turnstile serve` process and a `turnstile-bench serve --url` load
# generator in another process on the same machine, so the service's own CPU per acquire +
# release pair can be read from /proc (the in-process `turnstile-bench serve` cannot tell its
# load generator's CPU from the service's). Prints the generator's report and the service
# process's CPU per pair.
#
#   crates/bench/scripts/service-alone.sh [path/to/turnstile] [path/to/turnstile-bench] [seconds] [pairs/s]
#
# The second argument defaults to the turnstile-bench beside the first (ts_bench_bin in lib.sh).
# Without the fourth argument the generator runs a closed loop (saturation). Figures:
# docs/performance.md.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
serve_bin="${1:-target/release/turnstile}"
gen_bin="${2:-$(ts_bench_bin "$serve_bin")}"
seconds="${3:-6}"
rate_args=()
if [ -n "${4:-}" ]; then rate_args=(--rate "$4"); fi
ts_init
work="$TS_WORK"
ts_serve "$serve_bin" "$work/data"
pid=$TS_SERVE_PID
url=$TS_SERVE_URL
admin="$(ts_admin_key "$work/data")"
ts_put_profile "$url" "$admin" bench bench-v1 "$TS_BENCH_PROFILE"
key="$(ts_new_key "$url" "$admin" bench bench)"
# utime + stime of the service process, in clock ticks.
ticks() { ts_cpu_ticks "$pid"; }
hz=$(getconf CLK_TCK)
before=$(ticks)
"$gen_bin" serve --url "$url" --key "$key" --provider bench-provider \
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
