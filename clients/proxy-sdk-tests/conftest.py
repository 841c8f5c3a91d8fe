"""Fixtures: the real `openai` and `anthropic` SDKs against a real `turnstile serve` in proxy
mode (`examples/proxy.toml`), in front of the scripted fake upstream (`turnstile-bench
fake-upstream`).

The binaries come from `TURNSTILE_BIN` (default `target/debug/turnstile` at the repository
root) and `TURNSTILE_BENCH_BIN` (default `target/debug/turnstile-bench`). A missing binary or
SDK fails the session: these tests never skip. The upstream base
URLs and keys reach the service through the environment variables `examples/proxy.toml` names,
exactly as a user would set them; the SDKs use the demo principal key printed at first start.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
OPENAI_UPSTREAM_KEY = "sk-fake-openai-upstream"
ANTHROPIC_UPSTREAM_KEY = "sk-ant-fake-upstream"


def built_bin(variable: str, name: str) -> Path:
    """The binary `name` of package `name`: from the environment variable, or the debug build."""
    path = Path(os.environ.get(variable, REPO / "target" / "debug" / name))
    if not path.is_absolute():
        path = REPO / path
    if not path.is_file():
        pytest.fail(f"{name} binary not found at {path}: run `cargo build -p {name}`", pytrace=False)
    return path


class Process:
    """A child process whose stdout lines are read on a thread."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                pytest.fail(f"no line matching {pattern!r}:\n" + "".join(self.seen), pytrace=False)
            self.seen.append(line)
            if m := re.search(pattern, line):
                return m

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass
class Rig:
    base_url: str
    """The turnstile service, e.g. http://127.0.0.1:PORT."""
    fake_url: str
    key: str
    """The demo principal key."""

    def fake_stats(self) -> dict:
        with urllib.request.urlopen(self.fake_url + "/_stats") as response:
            return json.load(response)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.base_url + "/metrics") as response:
            return response.read().decode()

    def metric(self, series: str) -> float:
        for line in self.metrics().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{series} not in /metrics")


@pytest.fixture(scope="session")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    binary = str(built_bin("TURNSTILE_BIN", "turnstile"))
    fake = Process([str(built_bin("TURNSTILE_BENCH_BIN", "turnstile-bench")), "fake-upstream", "--port", "0"])
    fake_url = fake.expect(r"listening on (http://\S+)").group(1)
    env = dict(os.environ)
    env.update(
        TURNSTILE_OPENAI_BASE_URL=fake_url + "/v1",
        TURNSTILE_OPENAI_API_KEY=OPENAI_UPSTREAM_KEY,
        TURNSTILE_ANTHROPIC_BASE_URL=fake_url,
        TURNSTILE_ANTHROPIC_API_KEY=ANTHROPIC_UPSTREAM_KEY,
    )
    data = tmp_path_factory.mktemp("turnstile") / "data"
    service = Process(
        [binary, "serve", "--listen", "127.0.0.1:0", "--data", str(data), "--config", str(REPO / "examples" / "proxy.toml")],
        env=env,
    )
    try:
        base = service.expect(r"listening on (http://\S+)").group(1)
        key = service.expect(r"\b(tsk_[0-9A-Za-z_-]+)").group(1)
        yield Rig(base, fake_url, key)
    finally:
        service.stop()
        fake.stop()
