"""Fixtures: one real `turnstile serve` per test session.

The binary comes from `TURNSTILE_BIN` (default `target/debug/turnstile` at the repository
root; build it with `cargo build -p turnstile`). A missing binary fails the session: these
tests never skip. The service gets a temporary data directory, a free port (`--listen
127.0.0.1:0`, the address is read from its banner) and a config file with a short lease TTL,
so that heartbeats matter within a test.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from turnstile_client import Client

REPO = Path(__file__).resolve().parents[3]
TTL_MS = 1000
WORKSPACE = "clients"
PRINCIPAL = "py"


def _lane(**limits: object) -> dict[str, object]:
    return {"concurrency": 4, "requestsPerMinute": 6000, "tokensPerSecond": 100000, **limits}


# One lane per scenario and flavour (sync / async), so that a breaker or a pause opened by one
# test cannot change another test's answer.
PROFILE = {
    "workspace": {
        "concurrency": 64,
        "requestsPerMinute": 60000,
        "tokensPerSecond": 1000000,
        "minShare": {"standard": 0.25, "batch": 0.1},
    },
    "providers": {
        **{f"steady-{f}": _lane(tokensPerSecond=1000) for f in ("sync", "async")},
        **{f"solo-{f}": _lane(concurrency=1) for f in ("sync", "async")},
        **{f"expiry-{f}": _lane() for f in ("sync", "async")},
        **{
            f"fragile-{f}": _lane(circuitBreaker={"failureThreshold": 1, "openMs": 60000, "halfOpenMaxCalls": 1})
            for f in ("sync", "async")
        },
        **{f"pausable-{f}": _lane() for f in ("sync", "async")},
        "cancel-async": _lane(circuitBreaker={"failureThreshold": 1, "openMs": 60000, "halfOpenMaxCalls": 1}),
        **{f"events-{f}": _lane() for f in ("sync", "async")},
        # Token-fair turns (issue 31): the fairness answer names the lane's mode.
        **{f"fair-{f}": _lane(fairness="tokens") for f in ("sync", "async")},
    },
    "principals": {
        PRINCIPAL: {
            "concurrency": 32,
            "requestsPerMinute": 60000,
            "maxCostUsd": 1000,
            "allowUnknownCost": True,
            "weight": 2,
            "priority": "interactive",
        },
    },
}


@dataclass
class Service:
    base_url: str
    admin_key: str
    demo_key: str
    key: str
    """A principal key of workspace `clients` (profile `PROFILE`)."""
    process: subprocess.Popen[str]


def turnstile_bin() -> Path:
    path = Path(os.environ.get("TURNSTILE_BIN", REPO / "target" / "debug" / "turnstile"))
    if not path.is_absolute():
        path = REPO / path
    if not path.is_file():
        pytest.fail(
            f"turnstile binary not found at {path}: run `cargo build -p turnstile` or set TURNSTILE_BIN",
            pytrace=False,
        )
    return path


@contextlib.contextmanager
def running_service(root: Path) -> Iterator[Service]:
    """A `turnstile serve` with its data in `root`, the test profile and a principal key;
    stopped (SIGTERM, then kill) on exit unless the body stopped it already."""
    config = root / "turnstile.toml"
    config.write_text(f"[leases]\nttl_ms = {TTL_MS}\n")
    process = subprocess.Popen(
        [str(turnstile_bin()), "serve", "--listen", "127.0.0.1:0", "--data", str(root / "data"), "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    banner: list[str] = []
    base = admin = demo = None
    deadline = time.monotonic() + 30
    while demo is None:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None:
            process.kill()
            pytest.fail("turnstile serve did not print its banner:\n" + "".join(banner), pytrace=False)
        banner.append(line)
        if base is None and (m := re.search(r"listening on (http://\S+)", line)):
            base = m.group(1)
        if admin is None and (m := re.search(r"\b(tsa_[0-9A-Za-z_-]+)", line)):
            admin = m.group(1)
        if m := re.search(r"\b(tsk_[0-9A-Za-z_-]+)", line):
            demo = m.group(1)
    assert base and admin, "".join(banner)
    try:
        with Client(base, admin) as admin_client:
            admin_client.register_profile(WORKSPACE, "v1", PROFILE)
            key = admin_client.create_key(WORKSPACE, PRINCIPAL)["key"]
        yield Service(base, admin, demo, key, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(tmp_path_factory.mktemp("turnstile")) as running:
        yield running


@pytest.fixture
def client(service: Service) -> Iterator[Client]:
    with Client(service.base_url, service.key) as c:
        yield c


@pytest.fixture
def admin(service: Service) -> Iterator[Client]:
    with Client(service.base_url, service.admin_key) as c:
        yield c


def metric(text: str, name: str) -> float:
    """The value of an unlabelled Prometheus series."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    raise AssertionError(f"metric {name} not in /metrics")
