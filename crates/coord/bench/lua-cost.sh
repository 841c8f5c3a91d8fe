#!/usr/bin/env bash
# Redis time per acquire + release pair of the turnstile_v1 library on a known workload, with
# no turnstile process at all: loads crates/coord/src/lua/turnstile_v1.lua into a fresh
# redis-server, sends N pairs of FCALL ts_acquire_v1 / ts_release_v1 (unique members, the same
# arguments crates/coord/src/store.rs sends) through redis-cli, and prints INFO commandstats:
# usec per FCALL and per pair, and the redis.call()s per pair by command.
#
#   crates/coord/bench/lua-cost.sh [pairs] [workload]
#
# LIB=path/to/other.lua measures another version of the library (e.g. `git show
# main:crates/coord/src/lua/turnstile_v1.lua > /tmp/before.lua`), to alternate before/after runs.
#
# workloads: conc   three scopes (principal, workspace, provider) with concurrency only
#                   (the bench profile)
#            full   the same, plus a requests-per-minute and a tokens-per-second bucket on the
#                   provider and a token budget on the principal
#            held   conc with 3 leases held on the provider of concurrency 4 (the set near
#                   its limit: the expired-lease sweep runs)
set -euo pipefail
pairs="${1:-20000}"
workload="${2:-conc}"
here="$(cd "$(dirname "$0")" && pwd)"
lib="${LIB:-$here/../src/lua/turnstile_v1.lua}"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null || true' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
redis-cli -p "$port" -x FUNCTION LOAD REPLACE < "$lib" >/dev/null
python3 - "$pairs" "$workload" > /tmp/lua-cost-$$.txt <<'PY'
import sys
pairs, workload = int(sys.argv[1]), sys.argv[2]
W = "ts:{0123456789abcdef}:"
scopes = [("uaaaa", 4096), ("w", 4096), ("pbbbb", 4 if workload == "held" else 4096)]
def acquire(member):
    keys = [W + "pause:bbbb", W + "bud:cccc"]
    for name, _ in scopes:
        keys += [W + "lease:" + name, W + "bkt:" + name + ":rpm", W + "bkt:" + name + ":tps"]
    args = [member, "10000", "3", "100" if workload == "full" else "-1", "-1", "1"]
    for name, conc in scopes:
        rpm = ["600000", "600000"] if workload == "full" and name == "pbbbb" else ["-1", "-1"]
        tps = ["100000000", "100000000"] if workload == "full" and name == "pbbbb" else ["-1", "-1"]
        budget = ["-1", "-1", "1000000000000"] if workload == "full" and name == "uaaaa" else ["-1", "-1", "-1"]
        args += [name, str(conc)] + rpm + tps + budget
    return ["FCALL", "ts_acquire_v1", str(len(keys))] + keys + args
def release(member):
    keys = [W + "pause:bbbb", W + "bud:cccc"] + [W + "lease:" + n for n, _ in scopes]
    budgeted = ["uaaaa"] if workload == "full" else []
    args = [member, "3", "0", "100" if workload == "full" else "0", "90" if workload == "full" else "-1", "0", "-1"] + budgeted
    return ["FCALL", "ts_release_v1", str(len(keys))] + keys + args
out = sys.stdout
if workload == "held":
    for i in range(3):
        out.write(" ".join(acquire(f"held-{i}")) + "\n")
    out.write("CONFIG RESETSTAT\n")
for i in range(pairs):
    out.write(" ".join(acquire(f"r-{i}")) + "\n")
    out.write(" ".join(release(f"r-{i}")) + "\n")
PY
skip=0
if [ "$workload" = held ]; then
  skip=4
  head -n "$skip" /tmp/lua-cost-$$.txt | redis-cli -p "$port" > /dev/null
else
  redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
fi
# Ten batches, each read from commandstats: on a loaded host the minimum and median over the
# batches say more than the total (Redis's usec is wall-clock: preemption inflates it).
batch=$((pairs / 10))
per_batch=()
for b in $(seq 0 9); do
  before=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:calls=[0-9]*,usec=\([0-9]*\),.*/\1/p')
  sed -n "$((skip + b * batch * 2 + 1)),$((skip + (b + 1) * batch * 2))p" /tmp/lua-cost-$$.txt | redis-cli -p "$port" > /dev/null
  after=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:calls=[0-9]*,usec=\([0-9]*\),.*/\1/p')
  per_batch+=("$(echo "($after - ${before:-0}) / $batch" | bc -l)")
done
rm -f /tmp/lua-cost-$$.txt
stats="$(redis-cli -p "$port" INFO commandstats | tr -d '\r')"
echo "workload $workload, $pairs pairs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$stats" | grep -E '^cmdstat_fcall:' | sed 's/,rejected.*//'
printf '%s\n' "${per_batch[@]}" | sort -n | awk '{v[NR] = $1} END {printf "FCALL usec per pair over 10 batches: min %.1f, median %.1f, max %.1f\n", v[1], (v[5] + v[6]) / 2, v[NR]}'
echo "$stats" | awk -F'[:=,]' -v pairs="$pairs" '
  /^cmdstat_fcall:/ { printf "FCALL usec per pair: %.1f\n", $5 / pairs }
  /^cmdstat_/ && !/^cmdstat_(fcall|config|function|ping|info)/ { sub("cmdstat_", "", $1); calls[$1] = $3; usec[$1] = $5 }
  END { n = 0; for (c in calls) { printf "  %-18s %.2f per pair, %.1f usec per pair\n", c, calls[c] / pairs, usec[c] / pairs; n += calls[c] }
        printf "redis.call()s per pair: %.2f\n", n / pairs }'
