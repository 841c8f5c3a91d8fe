#!/usr/bin/env bash
# `/healthz` under an idle-connection flood (issue 34, item 8): one `turnstile serve` with the
# default connection limits (1,024 general + 32 reserved, 512 per address, 5 s header timeout),
# then 2,000 connections from 127.0.0.1-4 (500 each) that connect and send nothing. Once the
# flood has been open `settle` seconds, `probes` `GET /healthz` on fresh connections, 100 ms
# apart; prints how long the flood took to open and the probes' p50 / p95 / max (ms), and the
# service's `first-byte-timeout` cut count (idle connections that gave their place up).
#
#   crates/bench/scripts/idle-flood.sh [path/to/turnstile] [connections] [probes] [settle]
#
# Target: every probe ≤ 50 ms once the flood is open. While it is still opening, a probe can
# also wait out a SYN retransmission (1 s): the kernel drops SYNs while the listen backlog is
# full, before the service sees anything. Needs python3 and curl.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
serve_bin="${1:-target/release/turnstile}"
connections="${2:-2000}"
probes="${3:-20}"
settle="${4:-2}"
ts_init
ts_serve "$serve_bin" "$TS_WORK/data"
addr="${TS_SERVE_URL#http://}"
python3 - "$addr" "$connections" "$probes" "$settle" <<'PY'
import socket, sys, time, threading
host, port = sys.argv[1].rsplit(":", 1)
connections, probes, settle = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
flood, started = [], time.monotonic()
def open_from(source, count):
    for _ in range(count):
        s = socket.socket()
        s.bind((source, 0))
        s.connect((host, int(port)))
        flood.append(s)
# Four addresses, eight connecting threads each (a serial connect would wait out SYN retries).
threads = [threading.Thread(target=open_from,
                            args=(f"127.0.0.{1 + n % 4}", connections // 32 + (n < connections % 32)))
           for n in range(32)]
for t in threads: t.start()
for t in threads: t.join()
print(f"flood: {len(flood)} idle connections opened in {time.monotonic() - started:.2f} s")
time.sleep(settle)
times = []
for _ in range(probes):
    t0 = time.monotonic()
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = b""
    while chunk := s.recv(4096):
        answer += chunk
    s.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer
    times.append((time.monotonic() - t0) * 1000)
    time.sleep(0.1)
ordered = sorted(times)
pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
print(f"healthz under the flood ({probes} probes, ms): p50 {pick(0.5):.2f}, p95 {pick(0.95):.2f}, max {ordered[-1]:.2f}")
PY
curl -s "$TS_SERVE_URL/metrics" | grep 'turnstile_http_cuts_total{kind="first-byte-timeout"}' || true
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
