"""Fixtures for the console's browser tests: one real `turnstile serve`, one headless Chromium.

The binary comes from `TURNSTILE_BIN` (default `target/debug/turnstile`); Chromium and
chromedriver from Debian's `chromium` and `chromium-driver` packages (`CHROMIUM`,
`CHROMEDRIVER` override the paths). A missing binary, browser or driver fails the session:
these tests never skip.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService

REPO = Path(__file__).resolve().parents[4]
WORKSPACE = "console"


def lane(**limits: Any) -> dict[str, Any]:
    return {"concurrency": 4, "requestsPerMinute": 60000, "tokensPerSecond": 1000000, **limits}


PROFILE_V1 = {
    "workspace": {"concurrency": 64, "requestsPerMinute": 600000, "tokensPerSecond": 10000000},
    "providers": {
        "openai": lane(),
        "fragile": lane(circuitBreaker={"failureThreshold": 2, "openMs": 60000, "halfOpenMaxCalls": 1}),
        "anthropic": lane(concurrency=8, requestsPerMinute=1200),
        # Kept free of the load (history and fairness tests acquire here without waiting);
        # token-fair turns (issue 31), shown by the fairness view.
        "spare": lane(fairness="tokens"),
        # The rollout test's lane (issue 33): nothing else acquires, pauses or breaks it.
        "trial": lane(concurrency=8),
    },
    "principals": {
        "alice": {"concurrency": 32, "requestsPerMinute": 600000, "weight": 2, "priority": "interactive"},
        "bob": {"concurrency": 32, "requestsPerMinute": 600000},
    },
}

PROFILE_V2 = json.loads(json.dumps(PROFILE_V1))
PROFILE_V2["providers"]["openai"]["concurrency"] = 6
PROFILE_V2["providers"]["anthropic"]["requestsPerMinute"] = 2400


@dataclass
class Api:
    base: str

    def call(self, method: str, path: str, key: str | None, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if key:
            request.add_header("Authorization", "Bearer " + key)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            text = error.read().decode()
            try:
                return error.code, json.loads(text)
            except json.JSONDecodeError:
                return error.code, text


@dataclass
class Service:
    api: Api
    admin: str
    alice: str
    bob: str
    process: subprocess.Popen[str]

    @property
    def base(self) -> str:
        return self.api.base


def _path(env: str, default: str) -> str:
    value = os.environ.get(env) or shutil.which(default) or ""
    if not value or not Path(value).exists():
        pytest.fail(f"{default} not found (set {env}, or `apt-get install chromium chromium-driver`)", pytrace=False)
    return value


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    binary = Path(os.environ.get("TURNSTILE_BIN", REPO / "target" / "debug" / "turnstile"))
    if not binary.is_file():
        pytest.fail(f"turnstile binary not found at {binary}: run `cargo build -p turnstile`", pytrace=False)
    root = tmp_path_factory.mktemp("turnstile")
    config = root / "turnstile.toml"
    config.write_text("[leases]\nttl_ms = 30000\n")
    process = subprocess.Popen(
        [str(binary), "serve", "--listen", "127.0.0.1:0", "--data", str(root / "data"), "--config", str(config)],
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
    base = admin = demo = None
    banner: list[str] = []
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
    assert base and admin
    api = Api(base)
    assert api.call("PUT", f"/v1/workspaces/{WORKSPACE}/profiles/v1", admin, PROFILE_V1)[0] == 201
    assert api.call("PUT", f"/v1/workspaces/{WORKSPACE}/profiles/v2", admin, PROFILE_V2)[0] == 201
    keys = {}
    for principal in ("alice", "bob"):
        status, created = api.call("POST", f"/v1/workspaces/{WORKSPACE}/keys", admin, {"principalId": principal})
        assert status == 201, created
        keys[principal] = created["key"]
    try:
        yield Service(api, admin, keys["alice"], keys["bob"], process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = _path("CHROMIUM", "chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=DriverService(executable_path=_path("CHROMEDRIVER", "chromedriver")))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
