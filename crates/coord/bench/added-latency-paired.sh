#!/usr/bin/env bash
# Added admission latency measured **paired**: two `turnstile serve` processes side by side, one
# alone and one a replica on Redis (or, with CLUSTER=1, on a Redis Cluster of three primaries),
# loaded at the same time by one `turnstile-bench serve` (`--url A,B --key kA,kB`, 64 clients
# on each, each at the given rate). Both see the same host at the same instant, so the host's
# steal and noise fall on both alike, and the difference of their acquire percentiles is what
# Redis adds. Prints both, the differences and the host steal.
#
#   crates/coord/bench/added-latency-paired.sh [path/to/turnstile] [pairs/s per service] [seconds]
#   (the load generator: the turnstile-bench beside it, or $TURNSTILE_BENCH_BIN)
set -euo pipefail
bin="${1:-target/release/turnstile}"
. "$(dirname "$0")/../../bench/scripts/lib.sh"
bench_bin="$(ts_bench_bin "$bin")"
rate="${2:-1000}"
seconds="${3:-8}"
work="$(mktemp -d)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if [ "${CLUSTER:-0}" = 1 ]; then
  ports=()
  for _ in 1 2 3; do
    p=$(free_port); bus=$(free_port)
    redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --cluster-enabled yes \
      --cluster-port "$bus" --cluster-config-file "$work/nodes-$p.conf" --dir "$work" >/dev/null &
    pids+=($!); ports+=("$p")
  done
  for p in "${ports[@]}"; do until redis-cli -p "$p" ping >/dev/null 2>&1; do sleep 0.05; done; done
  redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >/dev/null
  for p in "${ports[@]}"; do until redis-cli -p "$p" cluster info | grep -q cluster_state:ok; do sleep 0.05; done; done
  coordination="redis_url = \"redis://127.0.0.1:${ports[0]},redis://127.0.0.1:${ports[1]},redis://127.0.0.1:${ports[2]}\"
redis_cluster = true"
else
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  pids+=($!)
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
  coordination="redis_url = \"redis://127.0.0.1:$port\""
fi
profile='{"workspace":{"concurrency":4096,"maxQueueLength":100000},"providers":{"bench-provider":{"concurrency":4096}},"principals":{"bench":{"concurrency":4096}}}'
# start NAME CONFIG: a service on its own data directory; sets url and key.
start() {
  mkdir -p "$work/$1"
  printf 'demo = false\n%s\n' "$2" > "$work/$1/turnstile.toml"
  "$bin" serve --listen 127.0.0.1:0 --data "$work/$1/data" --config "$work/$1/turnstile.toml" > "$work/$1/out" 2>&1 &
  pids+=($!)
  until grep -q "admin key:" "$work/$1/out" 2>/dev/null; do sleep 0.05; done
  url="http://$(sed -n 's/^turnstile serve: listening on http:\/\///p' "$work/$1/out" | head -1)"
  local admin
  admin="$(sed -n 's/^ *admin key: *//p' "$work/$1/out" | head -1)"
  curl -sf -X PUT "$url/v1/workspaces/bench/profiles/bench-v1" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' -d "$profile" >/dev/null
  key="$(curl -sf -X POST "$url/v1/workspaces/bench/keys" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' -d '{"principalId":"bench"}' | jq -r .key)"
}
start alone ""
alone_url="$url"; alone_key="$key"
start shared "[coordination]
$coordination"
shared_url="$url"; shared_key="$key"
steal_before=$(awk '/^cpu /{print $9}' /proc/stat)
"$bench_bin" serve --url "$alone_url,$shared_url" --key "$alone_key,$shared_key" \
  --provider bench-provider --clients 128 --rate "$((2 * rate))" --seconds "$seconds" --json > "$work/bench.json"
echo "paired at $rate pairs/s each$([ "${CLUSTER:-0}" = 1 ] && echo ', cluster'), host steal $(( $(awk '/^cpu /{print $9}' /proc/stat) - steal_before )) ticks (1/100 s)"
jq -c '{alone: .perTarget[0].acquireLatency, redis: .perTarget[1].acquireLatency,
  addedP50: ((.perTarget[1].acquireLatency.p50Ms - .perTarget[0].acquireLatency.p50Ms) * 1000 | round / 1000),
  addedP99: ((.perTarget[1].acquireLatency.p99Ms - .perTarget[0].acquireLatency.p99Ms) * 1000 | round / 1000),
  pairs: [.perTarget[0].pairs, .perTarget[1].pairs], failures}' "$work/bench.json"
