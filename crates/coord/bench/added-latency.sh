#!/usr/bin/env bash
# Added admission latency of one replica at a fixed rate, the service in its own process:
# `turnstile serve` with no Redis, with Redis (default probe / follow intervals), or with Redis
# and both background intervals at 1 s (to see whether the replica's periodic calls line up
# with the tail), or through a Redis Cluster of three primaries on this host (`cluster`:
# `--redis-cluster`, every node a seed). Prints the acquire p50 / p99 / max of
# `turnstile-bench serve --url --rate`, and with Redis its FCALLs and µs per pair (`INFO
# commandstats`, warm-up included) and the host steal.
#
#   crates/coord/bench/added-latency.sh [path/to/turnstile] [none|default|slow|cluster] [pairs/s] [seconds]
#   (the load generator: the turnstile-bench beside it, or $TURNSTILE_BENCH_BIN)
#
# Alternate the modes (and binaries) run by run: the host's speed moves between minutes.
set -euo pipefail
bin="${1:-target/release/turnstile}"
. "$(dirname "$0")/../../bench/scripts/lib.sh"
bench_bin="$(ts_bench_bin "$bin")"
mode="${2:-default}"
rate="${3:-1000}"
seconds="${4:-8}"
work="$(mktemp -d)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis_pids=()
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  for pid in "${redis_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
if [ "$mode" = cluster ]; then
  ports=()
  for i in 1 2 3; do
    p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    bus=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --cluster-enabled yes \
      --cluster-port "$bus" --cluster-config-file "$work/nodes-$p.conf" >/dev/null &
    redis_pids+=($!)
    ports+=("$p")
  done
  for p in "${ports[@]}"; do until redis-cli -p "$p" ping >/dev/null 2>&1; do sleep 0.05; done; done
  redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >/dev/null
  for p in "${ports[@]}"; do
    until redis-cli -p "$p" cluster info | grep -q cluster_state:ok; do sleep 0.05; done
  done
  urls="redis://127.0.0.1:${ports[0]},redis://127.0.0.1:${ports[1]},redis://127.0.0.1:${ports[2]}"
else
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  redis_pids+=($!)
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
fi
printf 'demo = false\n' > "$work/turnstile.toml"
case "$mode" in
  none) ;;
  default) printf '[coordination]\nredis_url = "redis://127.0.0.1:%s"\n' "$port" >> "$work/turnstile.toml" ;;
  slow) printf '[coordination]\nredis_url = "redis://127.0.0.1:%s"\nprobe_every_ms = 1000\nfollow_every_ms = 1000\n' "$port" >> "$work/turnstile.toml" ;;
  cluster) printf '[coordination]\nredis_url = "%s"\nredis_cluster = true\n' "$urls" >> "$work/turnstile.toml" ;;
  *) echo "mode: none, default, slow or cluster" >&2; exit 2 ;;
esac
"$bin" serve --listen 127.0.0.1:0 --data "$work/data" --config "$work/turnstile.toml" > "$work/out" 2>&1 &
serve_pid=$!
until grep -q "admin key:" "$work/out" 2>/dev/null; do sleep 0.05; done
url="http://$(sed -n 's/^turnstile serve: listening on http:\/\///p' "$work/out" | head -1)"
admin="$(sed -n 's/^ *admin key: *//p' "$work/out" | head -1)"
profile='{"workspace":{"concurrency":4096,"maxQueueLength":100000},"providers":{"bench-provider":{"concurrency":4096}},"principals":{"bench":{"concurrency":4096}}}'
curl -sf -X PUT "$url/v1/workspaces/bench/profiles/bench-v1" -H "Authorization: Bearer $admin" \
  -H 'Content-Type: application/json' -d "$profile" >/dev/null
key="$(curl -sf -X POST "$url/v1/workspaces/bench/keys" -H "Authorization: Bearer $admin" \
  -H 'Content-Type: application/json' -d '{"principalId":"bench"}' | jq -r .key)"
steal_before=$(awk '/^cpu /{print $9}' /proc/stat)
redis_cost=()
case "$mode" in
  none) ;;
  cluster) redis_cost=(--redis-url "$urls" --redis-cluster) ;;
  *) redis_cost=(--redis-url "redis://127.0.0.1:$port") ;;
esac
"$bench_bin" serve --url "$url" --key "$key" --provider bench-provider --rate "$rate" \
  --seconds "$seconds" "${redis_cost[@]}" --json > "$work/bench.json"
echo "mode $mode, host steal $(( $(awk '/^cpu /{print $9}' /proc/stat) - steal_before )) ticks (1/100 s)"
jq -c '{pairsPerSecond, failures, acquireP50: .acquireLatency.p50Ms, acquireP99: .acquireLatency.p99Ms, acquireMax: .acquireLatency.maxMs, redisUsecPerPair: .redis.usecPerPair, fcalls: .redis.fcalls}' "$work/bench.json"
