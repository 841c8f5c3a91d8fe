"""Several deployments per model, through the official `openai` SDK: a real
`turnstile serve --config examples/proxy-deployments.toml` in front of two scripted fake
upstreams (`turnstile-bench fake-upstream`), one per deployment of `gpt-5.4-mini` (weights 2
and 1, lanes `openai-primary` and `openai-secondary` of the demo workspace).

Each test gets its own service and fakes (a pause must not leak into the next test). The SDK
clients never retry (`max_retries=0`): what a test sees is the proxy's one answer.
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import openai
import pytest

from conftest import REPO, Process, built_bin

PRIMARY_KEY = "sk-fake-primary"
SECONDARY_KEY = "sk-fake-secondary"


@dataclass
class Fake:
    url: str

    def stats(self) -> dict:
        with urllib.request.urlopen(self.url + "/_stats") as response:
            return json.load(response)

    def requests(self) -> int:
        return int(self.stats()["requests"])

    def script(self, directives: str) -> None:
        """The fake's standing script: every request to it is answered so."""
        request = urllib.request.Request(self.url + "/_script", data=directives.encode(), method="POST")
        with urllib.request.urlopen(request) as response:
            assert response.status == 204


@dataclass
class Deployments:
    base_url: str
    key: str
    primary: Fake
    secondary: Fake

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url + "/openai/v1", api_key=self.key, max_retries=0)

    def chat(self, **extra: object) -> tuple[str, openai.types.chat.ChatCompletion]:
        """One chat call: the lane that served it (`x-turnstile-provider`) and the completion."""
        raw = self.client().chat.completions.with_raw_response.create(
            model="gpt-5.4-mini",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=20,
            **extra,  # type: ignore[arg-type]
        )
        return raw.headers["x-turnstile-provider"], raw.parse()

    def metric(self, series: str) -> float:
        with urllib.request.urlopen(self.base_url + "/metrics") as response:
            for line in response.read().decode().splitlines():
                if line.startswith(series + " "):
                    return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{series} not in /metrics")


@pytest.fixture
def deployments(tmp_path: Path) -> Iterator[Deployments]:
    bench = str(built_bin("TURNSTILE_BENCH_BIN", "turnstile-bench"))
    fakes = [Process([bench, "fake-upstream", "--port", "0"]) for _ in range(2)]
    urls = [fake.expect(r"listening on (http://\S+)").group(1) for fake in fakes]
    env = dict(os.environ)
    env.update(
        TURNSTILE_OPENAI_BASE_URL=urls[0] + "/v1",
        TURNSTILE_OPENAI_API_KEY=PRIMARY_KEY,
        TURNSTILE_OPENAI_SECONDARY_BASE_URL=urls[1] + "/v1",
        TURNSTILE_OPENAI_SECONDARY_API_KEY=SECONDARY_KEY,
        TURNSTILE_ANTHROPIC_BASE_URL=urls[1],
        TURNSTILE_ANTHROPIC_API_KEY="sk-ant-fake",
    )
    config = str(REPO / "examples" / "proxy-deployments.toml")
    binary = str(built_bin("TURNSTILE_BIN", "turnstile"))
    service = Process([binary, "serve", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "data"), "--config", config], env=env)
    try:
        base = service.expect(r"listening on (http://\S+)").group(1)
        key = service.expect(r"\b(tsk_[0-9A-Za-z_-]+)").group(1)
        yield Deployments(base, key, Fake(urls[0]), Fake(urls[1]))
    finally:
        service.stop()
        for fake in fakes:
            fake.stop()


def test_free_deployments_share_calls_by_weight(deployments: Deployments) -> None:
    lanes = [deployments.chat()[0] for _ in range(6)]
    assert lanes == ["openai-primary", "openai-secondary", "openai-primary"] * 2
    assert (deployments.primary.requests(), deployments.secondary.requests()) == (4, 2)
    assert deployments.primary.stats()["last_authorization"] == f"Bearer {PRIMARY_KEY}"
    assert deployments.secondary.stats()["last_authorization"] == f"Bearer {SECONDARY_KEY}"
    assert deployments.metric('turnstile_proxy_calls_total{lane="openai-primary",class="2xx"}') == 4


def test_a_429_fails_over_and_the_client_sees_one_success(deployments: Deployments) -> None:
    deployments.primary.script("status=429,retry-after=20")
    lane, completion = deployments.chat(extra_headers={"x-fake-script": "usage=7/9"})
    assert lane == "openai-secondary"
    assert completion.choices[0].message.content == "hello"
    assert completion.usage is not None and completion.usage.completion_tokens == 9
    assert (deployments.primary.requests(), deployments.secondary.requests()) == (1, 1)
    assert deployments.metric('turnstile_proxy_failovers_total{lane="openai-primary",cause="429"}') == 1
    assert deployments.metric('turnstile_proxy_upstream_pauses_total{lane="openai-primary"}') == 1


def test_a_paused_deployment_is_not_called_during_its_pause(deployments: Deployments) -> None:
    deployments.primary.script("status=429,retry-after=3")
    assert deployments.chat()[0] == "openai-secondary"
    deployments.primary.script("")
    # During the pause every call goes to the secondary, though the primary weighs more.
    lanes = [deployments.chat()[0] for _ in range(4)]
    assert lanes == ["openai-secondary"] * 4
    assert (deployments.primary.requests(), deployments.secondary.requests()) == (1, 5)
    # The secondary answers 429 too: the call fails over to the primary, waiting (within its
    # wait) until the primary's pause is over; it reaches the primary only then.
    deployments.secondary.script("status=429,retry-after=30")
    lane, completion = deployments.chat()
    assert lane == "openai-primary"
    assert completion.choices[0].message.content == "hello"
    arrivals = deployments.primary.stats()["arrivals"]
    assert len(arrivals) == 2
    assert arrivals[1]["at_ms"] - arrivals[0]["at_ms"] >= 2900, arrivals
    assert deployments.secondary.requests() == 6
