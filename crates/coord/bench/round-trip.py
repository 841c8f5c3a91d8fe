#!/usr/bin/env python3
"""A bare Redis round trip at a fixed rate, the baseline of the added-latency figures
(docs/performance.md, session 10): one call at a time on a fixed schedule against a fresh
redis-server, no turnstile process; prints the round trip's p50 / p99 / max and the host's
steal (1/100 s) over the run.

    crates/coord/bench/round-trip.py ping  [per second] [seconds]
    crates/coord/bench/round-trip.py fcall [pairs per second] [seconds]

`ping` sends PING. `fcall` loads crates/coord/src/lua/turnstile_v5.lua and sends acquire +
release pairs of the bench lane (three scopes with concurrency only, turns on; the arguments
crates/coord/src/protocol/ sends), timing the acquire, and prints Redis's FCALL µs per pair (INFO
commandstats).
"""
import os
import socket
import subprocess
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "ping"
rate = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
secs = float(sys.argv[3]) if len(sys.argv) > 3 else 8.0
lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "lua", "turnstile_v5.lua")


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read(c):
    buf = b""
    while not buf.endswith(b"\r\n"):
        buf += c.recv(65536)
    return buf


def steal():
    return int(open("/proc/stat").readline().split()[8])


s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
server = subprocess.Popen(
    ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
    stdout=subprocess.DEVNULL,
)
try:
    for _ in range(100):
        try:
            c = socket.create_connection(("127.0.0.1", port))
            break
        except OSError:
            time.sleep(0.05)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    P = "ts:{0123456789abcdef}:"
    scopes = ["uaaaa", "w", "pbbbb"]
    shape = "10000;50;-;1,4096;65,4096;65,4096"
    akeys = [P + "pause:bbbb"] + [P + "lease:" + n for n in scopes] + [P + "wait:w", P + "wait:pbbbb"]
    rkeys = [P + "lease:" + n for n in scopes]
    if mode == "fcall":
        c.sendall(resp("FUNCTION", "LOAD", "REPLACE", open(lib, "rb").read()))
        read(c)
        # The workspace's books trusted from the start (a new workspace's first grant waits for
        # the books' window: docs/replicas.md, "Redis loses the books").
        c.sendall(resp("SET", P + "ep", "0"))
        read(c)
        c.sendall(resp("CONFIG", "RESETSTAT"))
        read(c)
    steal0 = steal()
    lat = []
    n = int(rate * secs)
    start = time.perf_counter()
    for i in range(n):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        t0 = time.perf_counter()
        if mode == "fcall":
            c.sendall(resp("FCALL", "ts_acquire_v5", len(akeys), *akeys, f"m-{i}", shape, "uaaaa"))
            answer = read(c)
            lat.append((time.perf_counter() - t0) * 1000)
            assert answer.startswith(b":"), answer
            c.sendall(resp("FCALL", "ts_release_v5", len(rkeys), *rkeys, f"m-{i}"))
            read(c)
        else:
            c.sendall(b"PING\r\n")
            read(c)
            lat.append((time.perf_counter() - t0) * 1000)
    stolen = steal() - steal0
    lat.sort()
    line = (f"{mode} {rate}/s {secs:g} s: p50 {lat[len(lat) // 2]:.3f} ms, p99 "
            f"{lat[int(len(lat) * 0.99)]:.3f} ms, max {lat[-1]:.3f} ms; steal {stolen}, "
            f"load {open('/proc/loadavg').read().split()[0]}")
    if mode == "fcall":
        c.sendall(resp("INFO", "commandstats"))
        info = read(c).decode()
        stat = [l for l in info.split("\r\n") if l.startswith("cmdstat_fcall:")][0]
        usec = int(stat.split("usec=")[1].split(",")[0])
        line += f"; FCALL µs per pair {usec / n:.1f}"
    print(line)
finally:
    server.terminate()
    server.wait()
