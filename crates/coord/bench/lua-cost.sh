#!/usr/bin/env bash
# Redis time per acquire + release pair of the turnstile function library on a known workload,
# with no turnstile process at all: loads crates/coord/src/lua/turnstile_v5.lua into a fresh
# redis-server, sends N pairs of FCALL ts_acquire_v5 / ts_release_v5 (unique members, exactly
# the keys and arguments crates/coord/src/protocol/ sends; its unit tests pin the `conc` lane)
# through redis-cli, and prints INFO commandstats: usec per FCALL and per pair, and the
# redis.call()s per pair by command.
#
#   crates/coord/bench/lua-cost.sh [pairs] [workload]
#
# LIB=path/to/other.lua measures another version of the library (e.g. `git show
# <rev>:crates/coord/src/lua/turnstile_v1.lua > /tmp/before.lua`), to alternate before/after
# runs: a turnstile_v1 / turnstile_v2 library gets the v1 / v2 protocol, as the client of that
# release (store.rs / protocol.rs, now protocol/) sent it. TURNS=0 sends what a replica with `turn_window_ms = 0` sends (no fair turns); the default
# is the default configuration (turns on, 50 ms window: two wait keys on the bench lane).
#
# HOLD=H holds H leases in every lease zset before measuring (a replica under load holds
# its clients' leases: a zset's ZADD and ZREM cost grows with its members, so compare single
# calls and batches at the same holding; `held` is HOLD=3 on a provider of concurrency 4).
#
# BATCH=B (a v4 or v5 library) sends the same operations as FCALL ts_batch_v5, B operations per call
# (what a replica's batcher sends at load: B/2 acquires of new members, then the releases of
# the previous call's acquires, as at saturation, where each batch carries about as many of
# each); BATCH=1 (the default) sends the single functions, one call per operation (what a
# replica sends for an operation that finds nothing in flight, since session 10);
# ONE_OP_BATCHES=1 with BATCH=1 sends each operation as a ts_batch_v5 of one instead (what
# session 9's replicas sent at low load: about a fifth more instructions per pair).
#
# CALLGRIND=/tmp/out.cg runs redis-server under valgrind's callgrind and prints the
# instructions executed inside FCALL per pair (independent of the host's load, unlike usec;
# use a few hundred to a few thousand pairs: valgrind is ~50x slower); it also prints the
# instructions of Redis's whole command path per pair (the event loop, aeMain inclusive:
# reading and parsing the requests, dispatch, FCALL, writing the replies; less what is not the
# workload: redis-cli's COMMAND DOCS and INFO, FUNCTION LOAD, serverCron). Kernel time (the
# socket reads and writes, epoll) is not in either count.
# NOBKT=1 / NOBUD=1 drop
# the buckets / the budget from the `full` workload (to split its cost).
#
# workloads: conc   three scopes (principal, workspace, provider) with concurrency only
#                   (the bench profile)
#            full   the same, plus a requests-per-minute and a tokens-per-second bucket on the
#                   provider and a token budget on the principal (release corrects it)
#            held   conc with 3 leases held on the provider of concurrency 4 (the set near
#                   its limit: the expired-lease sweep runs)
set -euo pipefail
pairs="${1:-20000}"
workload="${2:-conc}"
here="$(cd "$(dirname "$0")" && pwd)"
lib="${LIB:-$here/../src/lua/turnstile_v5.lua}"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# CALLGRIND=file runs redis-server under valgrind's callgrind (instruction counts do not
# depend on the host's load; see the end of this script for the per-FCALL figure).
wrap=()
if [ -n "${CALLGRIND:-}" ]; then
  wrap=(valgrind --tool=callgrind --callgrind-out-file="$CALLGRIND")
fi
# REDIS_ARGS="--zset-max-listpack-entries 0" passes more options to redis-server.
# shellcheck disable=SC2086
"${wrap[@]}" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no ${REDIS_ARGS:-} >/dev/null 2>&1 &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null || true; wait $redis_pid 2>/dev/null || true' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
loaded="$(redis-cli -p "$port" -x FUNCTION LOAD REPLACE < "$lib")"
case "$loaded" in turnstile_v*) ;; *) echo "FUNCTION LOAD failed: $loaded" >&2; exit 1 ;; esac
proto=v5
if grep -q '^#!lua name=turnstile_v4' "$lib"; then proto=v4; fi
if grep -q '^#!lua name=turnstile_v3' "$lib"; then proto=v3; fi
if grep -q '^#!lua name=turnstile_v1' "$lib"; then proto=v1; fi
if grep -q '^#!lua name=turnstile_v2' "$lib"; then proto=v2; fi
# The bench workspace's books trusted from the start (v5: a new workspace's first grant waits
# for the books' window, docs/replicas.md "Redis loses the books"); older libraries ignore it.
redis-cli -p "$port" SET 'ts:{0123456789abcdef}:ep' 0 >/dev/null
batch_ops="${BATCH:-1}"
if [ "$batch_ops" != 1 ] && [ "$proto" != v4 ] && [ "$proto" != v5 ]; then echo "BATCH needs a turnstile_v4 or v5 library" >&2; exit 1; fi
hold="${HOLD:-0}"
if [ "$workload" = held ]; then hold=3; fi
python3 - "$pairs" "$workload" "$proto" "${TURNS:-1}" "$batch_ops" "$hold" > /tmp/lua-cost-$$.txt <<'PY'
import sys
pairs, workload, proto, turns = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
batch_ops, hold = int(sys.argv[5]), int(sys.argv[6])
P = "ts:{0123456789abcdef}:"
full = workload == "full"
scopes = [("uaaaa", 4096), ("w", 4096), ("pbbbb", 4 if workload == "held" else 4096)]
# Fair scopes: every scope but the principal's (all of them have a concurrency here).
fair = [1, 2] if turns else []
import os
rpm = {"pbbbb": ("600000", "600000")} if full and os.environ.get("NOBKT") is None else {}
tps = {"pbbbb": ("100000000", "100000000")} if full and os.environ.get("NOBKT") is None else {}
max_tokens = {"uaaaa": "1000000000000"} if full and os.environ.get("NOBUD") is None else {}
tokens = "100" if full else "-1"
def acquire_v2(member, v3=False):
    keys, shape = [P + "pause:bbbb"], ["10000", "50" if fair else "-", "-"]
    for i, (name, conc) in enumerate(scopes):
        flags = 1 + (2 if name in rpm else 0) + (4 if name in tps else 0) \
            + (32 if name in max_tokens else 0) + (64 if i in fair else 0)
        keys.append(P + "lease:" + name)
        values = [str(flags), str(conc)]
        if v3 and (name in rpm or name in tps):
            keys.append(P + "bkt:" + name)
        if name in rpm:
            if not v3: keys.append(P + "bkt:" + name + ":rpm")
            values += list(rpm[name])
        if name in tps:
            if not v3: keys.append(P + "bkt:" + name + ":tps")
            values += list(tps[name])
        if name in max_tokens:
            values += [name, max_tokens[name]]
        shape.append(",".join(values))
    if max_tokens:
        keys.append(P + "bud:cccc")
    keys += [P + "wait:" + scopes[i][0] for i in fair]
    args = [member, ";".join(shape)] + (["uaaaa"] if fair else []) + ([tokens, "-1"] if full else [])
    return ["FCALL", ("ts_acquire_" + proto) if v3 else "ts_acquire_v2", str(len(keys))] + keys + args
def release_v2(member, v3=False):
    keys = [P + "lease:" + n for n, _ in scopes]
    args = [member]
    if max_tokens:
        keys.append(P + "bud:cccc")
        args += ["3", "0", "-", "100", "90", "0", "-1", "uaaaa"]
    return ["FCALL", ("ts_release_" + proto) if v3 else "ts_release_v2", str(len(keys))] + keys + args
def acquire_v1(member):
    keys = [P + "pause:bbbb", P + "bud:cccc"]
    for name, _ in scopes:
        keys += [P + "lease:" + name, P + "bkt:" + name + ":rpm", P + "bkt:" + name + ":tps"]
    keys += [P + "wait:" + scopes[i][0] for i in fair]
    args = [member, "10000", "3", tokens, "-1", "1"]
    for name, conc in scopes:
        args += [name, str(conc)] + list(rpm.get(name, ("-1", "-1"))) + list(tps.get(name, ("-1", "-1")))
        args += ["-1", "-1", max_tokens.get(name, "-1")]
    args.append(str(len(fair)))
    if fair:
        args += [str(i + 1) for i in fair] + ["1", "50", P]
    args.append("-1")
    return ["FCALL", "ts_acquire_v1", str(len(keys))] + keys + args
def release_v1(member):
    keys = [P + "pause:bbbb", P + "bud:cccc"] + [P + "lease:" + n for n, _ in scopes]
    args = [member, "3", "0", "100" if full else "0", "90" if full else "-1", "0", "-1"]
    args += ["uaaaa"] if full else []
    return ["FCALL", "ts_release_v1", str(len(keys))] + keys + args
acquire, release = {
    "v1": (acquire_v1, release_v1),
    "v2": (acquire_v2, release_v2),
    "v3": (lambda m: acquire_v2(m, True), lambda m: release_v2(m, True)),
    "v4": (lambda m: acquire_v2(m, True), lambda m: release_v2(m, True)),
    "v5": (lambda m: acquire_v2(m, True), lambda m: release_v2(m, True)),
}[proto]
def batch(calls):
    """ts_batch_v5 of single calls ['FCALL', fn, nkeys, keys..., args...]."""
    keys, ops = [], []
    for c in calls:
        nk = int(c[2])
        kind = "a" if c[1].startswith("ts_acquire") else "r"
        k, a = c[3:3 + nk], c[3 + nk:]
        keys += k
        ops += [kind, str(nk), str(len(a))] + a
    return ["FCALL", "ts_batch_" + proto, str(len(keys))] + keys + ops
out = sys.stdout
if hold:
    for i in range(hold):
        out.write(" ".join(acquire(f"held-{i}")) + "\n")
    out.write("CONFIG RESETSTAT\n")
if batch_ops == 1 and os.environ.get("ONE_OP_BATCHES"):
    for i in range(pairs):
        out.write(" ".join(batch([acquire(f"r-{i}")])) + "\n")
        out.write(" ".join(batch([release(f"r-{i}")])) + "\n")
elif batch_ops == 1:
    for i in range(pairs):
        out.write(" ".join(acquire(f"r-{i}")) + "\n")
        out.write(" ".join(release(f"r-{i}")) + "\n")
else:
    half = max(batch_ops // 2, 1)
    previous = []
    for start in range(0, pairs, half):
        members = [f"r-{i}" for i in range(start, min(start + half, pairs))]
        calls = [acquire(m) for m in members] + [release(m) for m in previous]
        out.write(" ".join(batch(calls)) + "\n")
        previous = members
    out.write(" ".join(batch([release(m) for m in previous])) + "\n")
PY
skip=0
if [ "$hold" != 0 ]; then
  skip=$((hold + 1))
  head -n "$skip" /tmp/lua-cost-$$.txt | redis-cli -p "$port" > /dev/null
else
  redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
fi
# Ten slices, each read from commandstats: on a loaded host the minimum and median over the
# slices say more than the total (Redis's usec is wall-clock: preemption inflates it). A
# slice is a tenth of the calls (about a tenth of the pairs).
lines=$(( $(wc -l < /tmp/lua-cost-$$.txt) - skip ))
slice=$(( (lines + 9) / 10 ))
batch=$((pairs / 10))
per_batch=()
for b in $(seq 0 9); do
  before=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:calls=[0-9]*,usec=\([0-9]*\),.*/\1/p')
  sed -n "$((skip + b * slice + 1)),$((skip + (b + 1) * slice))p" /tmp/lua-cost-$$.txt | redis-cli -p "$port" > /dev/null
  after=$(redis-cli -p "$port" INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:calls=[0-9]*,usec=\([0-9]*\),.*/\1/p')
  per_batch+=("$(echo "($after - ${before:-0}) / $batch" | bc -l)")
done
rm -f /tmp/lua-cost-$$.txt
stats="$(redis-cli -p "$port" INFO commandstats | tr -d '\r')"
echo "workload $workload ($proto, turns ${TURNS:-1}, batch ${batch_ops}), $pairs pairs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$stats" | grep -E '^cmdstat_fcall:' | sed 's/,rejected.*//'
printf '%s\n' "${per_batch[@]}" | sort -n | awk '{v[NR] = $1} END {printf "FCALL usec per pair over 10 slices: min %.1f, median %.1f, max %.1f\n", v[1], (v[5] + v[6]) / 2, v[NR]}'
echo "$stats" | awk -F'[:=,]' -v pairs="$pairs" '
  /^cmdstat_fcall:/ { printf "FCALL usec per pair: %.1f\n", $5 / pairs }
  /^cmdstat_/ && !/^cmdstat_(fcall|config|function|ping|info|command)/ { sub("cmdstat_", "", $1); calls[$1] = $3; usec[$1] = $5 }
  END { n = 0; for (c in calls) { printf "  %-18s %.2f per pair, %.1f usec per pair\n", c, calls[c] / pairs, usec[c] / pairs; n += calls[c] }
        printf "redis.call()s per pair: %.2f\n", n / pairs }'
if [ -n "${CALLGRIND:-}" ]; then
  kill "$redis_pid"; wait "$redis_pid" 2>/dev/null || true
  incl=$(callgrind_annotate --inclusive=yes --threshold=100 "$CALLGRIND" 2>/dev/null)
  of() { echo "$incl" | awk -v f="$1" '$0 ~ ":" f " " {gsub(",", "", $1); n = $1} END {print n + 0}'; }
  ir=$(of fcallCommand)
  # The event loop without what is not the workload: redis-cli's COMMAND DOCS and INFO, the
  # library's load, CONFIG RESETSTAT and the timers (serverCron runs by wall-clock time).
  loop=$(( $(of aeMain) - $(of commandDocsCommand) - $(of functionLoadCommand) - $(of infoCommand) \
    - $(of serverCron) - $(of configResetStatCommand) ))
  echo "instructions inside FCALL (callgrind, fcallCommand inclusive): $ir, per pair: $((ir / pairs))"
  echo "instructions of the command path (aeMain inclusive, less redis-cli's COMMAND DOCS and INFO, FUNCTION LOAD, serverCron): $loop, per pair: $((loop / pairs))"
fi
