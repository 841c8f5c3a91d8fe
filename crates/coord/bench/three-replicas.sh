#!/usr/bin/env bash
# Three `turnstile serve` replicas on one redis-server, each loaded by its own
# `turnstile-bench serve` (closed loop), all on this machine; prints each replica's report, the FCALLs and Redis CPU
# per acquire + release pair from INFO (commandstats and used_cpu_*), each process's CPU per
# pair, and the host's steal (ticks of 1/100 s, /proc/stat) over the run. Figures: docs/performance.md.
#
#   crates/coord/bench/three-replicas.sh [path/to/turnstile] [seconds] [clients per replica] [pairs/s per replica]
#   (the load generator: the turnstile-bench beside it, or $TURNSTILE_BENCH_BIN)
#
# Without the fourth argument each generator runs a closed loop (saturation); with it, an open
# loop at that rate (`turnstile-bench serve --rate`). With TIMELINE_DIR set, each generator also
# writes its pairs to $TIMELINE_DIR/bench{0,1,2}.csv (`--timeline`), to see when a tail happened
# and whether the three replicas stalled together (the host) or one alone. With GENERATOR=one, a
# single `turnstile-bench serve` drives all three replicas (3 × the clients, client i on replica
# i mod 3) instead of one generator process per replica.
set -euo pipefail
bin="${1:-target/release/turnstile}"
. "$(dirname "$0")/../../bench/scripts/lib.sh"
bench_bin="$(ts_bench_bin "$bin")"
seconds="${2:-10}"
clients="${3:-32}"
rate_args=()
if [ -n "${4:-}" ]; then rate_args=(--rate "$4"); fi
timeline_args() { if [ -n "${TIMELINE_DIR:-}" ]; then echo "--timeline $TIMELINE_DIR/bench$1.csv"; fi; }
work="$(mktemp -d)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# REDIS_ARGS="--zset-max-listpack-entries 0" passes more options to redis-server.
# shellcheck disable=SC2086
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no ${REDIS_ARGS:-} >/dev/null &
redis_pid=$!
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  kill "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
profile='{"workspace":{"concurrency":4096,"maxQueueLength":100000},"providers":{"bench-provider":{"concurrency":4096}},"principals":{"bench":{"concurrency":4096}}}'
urls=(); keys=()
# Keys and profiles are shared through Redis (docs/replicas.md): the first replica prints the
# admin key and registers the profile and the client key; the other two adopt them.
for i in 1 2 3; do
  mkdir -p "$work/r$i"
  printf 'demo = false\n' > "$work/r$i/turnstile.toml"
  "$bin" serve --listen 127.0.0.1:0 --data "$work/r$i" --config "$work/r$i/turnstile.toml" \
    --redis-url "redis://127.0.0.1:$port" > "$work/r$i/out" 2>&1 &
  pids+=($!)
  until grep -q "listening on" "$work/r$i/out" 2>/dev/null; do sleep 0.05; done
  url="http://$(sed -n 's/^turnstile serve: listening on http:\/\///p' "$work/r$i/out" | head -1)"
  if [ "$i" = 1 ]; then
    until grep -q "admin key:" "$work/r$i/out" 2>/dev/null; do sleep 0.05; done
    admin="$(sed -n 's/^ *admin key: *//p' "$work/r$i/out" | head -1)"
    curl -sf -X PUT "$url/v1/workspaces/bench/profiles/bench-v1" -H "Authorization: Bearer $admin" \
      -H 'Content-Type: application/json' -d "$profile" >/dev/null
    key="$(curl -sf -X POST "$url/v1/workspaces/bench/keys" -H "Authorization: Bearer $admin" \
      -H 'Content-Type: application/json' -d '{"principalId":"bench"}' | jq -r .key)"
  fi
  urls+=("$url"); keys+=("$key")
done
# The other replicas follow the shared feed every 100 ms: let them see the key and profile.
sleep 1
redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
# Shared admissions of all replicas (/metrics): one per pair; FCALLs per pair are 2 one by one
# (turnstile_v3) and fewer with batches (turnstile_v4 and later), so pairs are counted here, not by FCALL.
admissions() {
  local n=0 url
  for url in "${urls[@]}"; do
    n=$((n + $(curl -sf -H "Authorization: Bearer $admin" "$url/metrics" \
      | awk '/^turnstile_coordination_shared_admissions_total / {print $2}')))
  done
  echo "$n"
}
admissions_before=$(admissions)
cpu() { redis-cli -p "$port" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
cpu_before=$(cpu)
steal() { awk '/^cpu /{print $9}' /proc/stat; }
steal_before=$(steal)
# CPU seconds (user + system) of a process, from /proc (replicas and redis-server).
proc_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$1/stat"; }
replica_before=(); for pid in "${pids[@]}"; do replica_before+=("$(proc_cpu "$pid")"); done
redis_proc_before=$(proc_cpu "$redis_pid")
if [ "${GENERATOR:-three}" = one ]; then
  # One load generator for the three replicas: 3 × clients, client i on replica i mod 3, and
  # 3 × the rate per replica in all.
  one_rate=()
  if [ -n "${4:-}" ]; then one_rate=(--rate "$((3 * $4))"); fi
  gens=(0)
  "$bench_bin" serve --url "$(IFS=,; echo "${urls[*]}")" --key "${keys[0]}" --provider bench-provider \
    --clients "$((3 * clients))" --seconds "$seconds" "${one_rate[@]}" $(timeline_args 0) \
    --json > "$work/bench0.json"
else
  gens=(0 1 2)
  for i in 0 1 2; do
    "$bench_bin" serve --url "${urls[$i]}" --key "${keys[$i]}" --provider bench-provider \
      --clients "$clients" --seconds "$seconds" "${rate_args[@]}" $(timeline_args "$i") \
      --json > "$work/bench$i.json" &
    bench_pids[$i]=$!
  done
  for i in 0 1 2; do wait "${bench_pids[$i]}"; done
fi
cpu_after=$(cpu)
admissions_after=$(admissions)
replica_after=(); for pid in "${pids[@]}"; do replica_after+=("$(proc_cpu "$pid")"); done
redis_proc_after=$(proc_cpu "$redis_pid")
total=0
for i in "${gens[@]}"; do
  jq -c '{pairs, pairsPerSecond, failures, requestP50: .requestLatency.p50Ms, requestP99: .requestLatency.p99Ms, pairP99: .pairLatency.p99Ms}' "$work/bench$i.json"
  total=$((total + $(jq .pairs "$work/bench$i.json")))
done
echo "host steal during the run: $(( $(steal) - steal_before )) ticks (1/100 s)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "pairs measured (3 replicas): $total in ${seconds} s (warm-up excluded): $((total / seconds)) pairs/s"
redis-cli -p "$port" INFO commandstats | tr -d '\r' | grep -E 'cmdstat_(fcall|fcall_ro):' || true
fcall_usec=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:calls=[0-9]*,usec=\([0-9]*\),.*/\1/p')
echo "Redis CPU (used_cpu_user+sys) during warm-up + run: $(echo "$cpu_after - $cpu_before" | bc -l) s"
fcall_calls=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:calls=\([0-9]*\),.*/\1/p')
# CPU per pair of each process (warm-up included in the CPU, so divided by all pairs: the
# replicas' shared admissions over the same window), and of the generators (their own
# report, measured window only).
all_pairs=$((admissions_after - admissions_before))
echo "pairs (shared admissions, warm-up included): $all_pairs; FCALLs per pair: $(echo "$fcall_calls / $all_pairs" | bc -l | cut -c1-5)"
echo "FCALL usec per pair (warm-up included): $(echo "$fcall_usec / $all_pairs" | bc -l | cut -c1-6)"
for i in 0 1 2; do
  echo "replica $((i + 1)) CPU per pair: $(echo "1000000 * (${replica_after[$i]} - ${replica_before[$i]}) / ($all_pairs / 3)" | bc -l | cut -c1-6) us"
done
echo "redis-server CPU per pair: $(echo "1000000 * ($redis_proc_after - $redis_proc_before) / $all_pairs" | bc -l | cut -c1-6) us"
for i in "${gens[@]}"; do
  echo "generator $((i + 1)) CPU per pair: $(jq '1000000 * .processCpuSeconds / .pairs' "$work/bench$i.json" | cut -c1-6) us"
done
