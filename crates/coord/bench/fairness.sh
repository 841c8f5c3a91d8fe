#!/usr/bin/env bash
# Two principals saturating one provider (concurrency 4) through two replicas each, closed
# loop: admissions per principal and Jain's index. Figures: docs/performance.md.
#
#   crates/coord/bench/fairness.sh [path/to/turnstile] [seconds] [clients per principal and replica]
#   (the load generator: the turnstile-bench beside it, or $TURNSTILE_BENCH_BIN)
set -euo pipefail
bin="${1:-target/release/turnstile}"
. "$(dirname "$0")/../../bench/scripts/lib.sh"
bench_bin="$(ts_bench_bin "$bin")"
seconds="${2:-10}"
clients="${3:-8}"
work="$(mktemp -d)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
redis_pid=$!
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  kill "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
profile='{"workspace":{"concurrency":64,"maxQueueLength":100000},"providers":{"p":{"concurrency":4,"maxQueueLength":100000}},"principals":{"a":{"concurrency":64,"maxQueueLength":100000},"b":{"concurrency":64,"maxQueueLength":100000}}}'
declare -A key
urls=()
# Keys and profiles are shared through Redis (docs/replicas.md): the first replica prints the
# admin key and registers the profile and the principals' keys; the second adopts them.
for i in 1 2; do
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
    curl -sf -X PUT "$url/v1/workspaces/fair/profiles/v1" -H "Authorization: Bearer $admin" \
      -H 'Content-Type: application/json' -d "$profile" >/dev/null
  fi
  for p in a b; do
    if [ "$i" = 1 ]; then
      key[$i$p]="$(curl -sf -X POST "$url/v1/workspaces/fair/keys" -H "Authorization: Bearer $admin" \
        -H 'Content-Type: application/json' -d "{\"principalId\":\"$p\"}" | jq -r .key)"
    else
      key[$i$p]="${key[1$p]}"
    fi
  done
  urls+=("$url")
done
# The other replica follows the shared feed every 100 ms: let it see the keys and profile.
sleep 1
n=0
for i in 1 2; do
  for p in a b; do
    "$bench_bin" serve --url "${urls[$((i-1))]}" --key "${key[$i$p]}" --provider p \
      --clients "$clients" --seconds "$seconds" --json > "$work/$i$p.json" &
    bench[$n]=$!; n=$((n+1))
  done
done
for pid in "${bench[@]}"; do wait "$pid"; done
a=$(( $(jq .pairs "$work/1a.json") + $(jq .pairs "$work/2a.json") ))
b=$(( $(jq .pairs "$work/1b.json") + $(jq .pairs "$work/2b.json") ))
for url in "${urls[@]}"; do
  echo "$url: $(curl -sf "$url/metrics" | grep -E '^turnstile_coordination_(errors_total|degraded_admissions_total|shared_admissions_total|state\{state="healthy"\})' | tr '\n' ' ')"
done
for f in 1a 2a 1b 2b; do echo "$f: $(jq -c '{pairs, failures}' "$work/$f.json")"; done
echo "principal a: $a, principal b: $b, Jain index: $(echo "($a + $b)^2 / (2 * ($a^2 + $b^2))" | bc -l)"
