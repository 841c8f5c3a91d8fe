# Shared setup of the bench scripts: a scratch directory cleaned up at exit, redis-server on a
# free port, `turnstile serve` processes, the bench profile and principal keys, and the
# `turnstile-bench` binary that loads them. Sourced, not run (crates/bench/scripts/service-alone.sh;
# crates/coord/bench/*.sh source it for ts_bench_bin and still spell the other steps out):
#
#   . "$(dirname "$0")/../../bench/scripts/lib.sh"   # from crates/coord/bench
#   bench="$(ts_bench_bin "$bin")"                # turnstile-bench beside $bin
#   ts_init                                       # $TS_WORK, the EXIT trap
#   ts_redis                                      # $TS_REDIS_PORT, $TS_REDIS_URL (REDIS_ARGS adds options)
#   ts_serve "$bin" "$TS_WORK/r1" --redis-url "$TS_REDIS_URL"   # $TS_SERVE_PID, $TS_SERVE_URL
#   admin="$(ts_admin_key "$TS_WORK/r1")"
#   ts_put_profile "$TS_SERVE_URL" "$admin" bench bench-v1 "$TS_BENCH_PROFILE"
#   key="$(ts_new_key "$TS_SERVE_URL" "$admin" bench bench)"
#
# Every process started here is stopped at exit (by its PID) and $TS_WORK is removed. A script
# that sets its own EXIT trap calls ts_cleanup from it. Needs curl, jq, python3 (a free port)
# and, for ts_redis, redis-server and redis-cli.

# One provider and one principal wide enough that the service, not the profile, is what a
# closed loop saturates.
TS_BENCH_PROFILE='{"workspace":{"concurrency":4096,"maxQueueLength":100000},"providers":{"bench-provider":{"concurrency":4096}},"principals":{"bench":{"concurrency":4096}}}'

# PIDs to stop at exit.
ts_pids=()

# Creates the scratch directory $TS_WORK and the EXIT trap that cleans up.
ts_init() {
  TS_WORK="$(mktemp -d)"
  trap ts_cleanup EXIT
}

# Stops every process ts_track registered (last started first) and removes $TS_WORK.
ts_cleanup() {
  local i
  for ((i = ${#ts_pids[@]} - 1; i >= 0; i--)); do
    kill "${ts_pids[$i]}" 2>/dev/null || true
    wait "${ts_pids[$i]}" 2>/dev/null || true
  done
  if [ -n "${TS_WORK:-}" ]; then rm -rf "$TS_WORK"; fi
}

# Stops PID at exit.
ts_track() {
  ts_pids+=("$1")
}

# ts_bench_bin TURNSTILE_BIN: prints the `turnstile-bench` binary that runs the load tools:
# $TURNSTILE_BENCH_BIN when set, else the one beside TURNSTILE_BIN (cargo builds both into one
# directory: `cargo build --release -p turnstile -p turnstile-bench`). A missing one is an
# error that names the build command.
ts_bench_bin() {
  local bench="${TURNSTILE_BENCH_BIN:-$(dirname "$1")/turnstile-bench}"
  if [ ! -x "$bench" ]; then
    echo "error: no $bench: cargo build --release -p turnstile-bench (or set TURNSTILE_BENCH_BIN)" >&2
    return 1
  fi
  printf '%s\n' "$bench"
}

# Prints a free TCP port on loopback.
ts_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts redis-server on a free loopback port without persistence (REDIS_ARGS: more options)
# and waits until it answers PING. Sets TS_REDIS_PORT, TS_REDIS_PID and TS_REDIS_URL.
ts_redis() {
  TS_REDIS_PORT="$(ts_free_port)"
  # shellcheck disable=SC2086
  redis-server --port "$TS_REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    ${REDIS_ARGS:-} >/dev/null &
  TS_REDIS_PID=$!
  ts_track "$TS_REDIS_PID"
  until redis-cli -p "$TS_REDIS_PORT" ping >/dev/null 2>&1; do sleep 0.05; done
  TS_REDIS_URL="redis://127.0.0.1:$TS_REDIS_PORT"
}

# ts_serve BIN DIR [ARGS...]: starts `BIN serve` on a free loopback port with its data in DIR
# and the config DIR/turnstile.toml (written as `demo = false` unless the caller wrote one),
# output in DIR/out, and waits until it listens. Sets TS_SERVE_PID and TS_SERVE_URL.
ts_serve() {
  local bin="$1" dir="$2"
  shift 2
  mkdir -p "$dir"
  if [ ! -f "$dir/turnstile.toml" ]; then printf 'demo = false\n' > "$dir/turnstile.toml"; fi
  "$bin" serve --listen 127.0.0.1:0 --data "$dir" --config "$dir/turnstile.toml" "$@" \
    > "$dir/out" 2>&1 &
  TS_SERVE_PID=$!
  ts_track "$TS_SERVE_PID"
  until grep -q "listening on" "$dir/out" 2>/dev/null; do sleep 0.05; done
  TS_SERVE_URL="http://$(sed -n 's/^turnstile serve: listening on http:\/\///p' "$dir/out" | head -1)"
}

# ts_admin_key DIR: waits for the admin key that `turnstile serve` prints at its first start
# (ts_serve's output in DIR/out) and prints it.
ts_admin_key() {
  until grep -q "admin key:" "$1/out" 2>/dev/null; do sleep 0.05; done
  sed -n 's/^ *admin key: *//p' "$1/out" | head -1
}

# ts_put_profile URL ADMIN WORKSPACE VERSION PROFILE_JSON: registers the profile (fails on an
# HTTP error).
ts_put_profile() {
  curl -sf -X PUT "$1/v1/workspaces/$3/profiles/$4" -H "Authorization: Bearer $2" \
    -H 'Content-Type: application/json' -d "$5" >/dev/null
}

# ts_new_key URL ADMIN WORKSPACE PRINCIPAL: creates a principal key and prints it.
ts_new_key() {
  curl -sf -X POST "$1/v1/workspaces/$3/keys" -H "Authorization: Bearer $2" \
    -H 'Content-Type: application/json' -d "{\"principalId\":\"$4\"}" | jq -r .key
}

# ts_cpu_ticks PID: user + system CPU of a process so far, in clock ticks (getconf CLK_TCK).
ts_cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}
