"""The caller's own rate-limit headers through the official SDKs (issue 32, item 3).

The demo principal has a request limit of its own (`requestsPerMinute: 120`: 120 requests, one
back every 500 ms) and no token limit; the workspace and the lane have larger ones (600 and 300
requests a minute), and the fake upstream sends the account's `x-ratelimit-remaining-requests:
4999`. The SDK's raw response must show the caller's figures only, decreasing as it spends.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, timezone

import anthropic
import openai

from conftest import Rig

LIMIT = 120
REFILL_S = 0.5
"""One request back every 500 ms (120 a minute)."""


def go_duration_s(text: str) -> float:
    """A Go duration (`0s`, `20ms`, `1.5s`, `1m0s`) in seconds."""
    if text.endswith("ms"):
        return float(text[:-2]) / 1000
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:([\d.]+)s)", text)
    assert parts, f"not a Go duration: {text!r}"
    hours, minutes, seconds = (float(p) if p else 0.0 for p in parts.groups())
    return hours * 3600 + minutes * 60 + seconds


def test_openai_raw_response_carries_the_callers_figures_decreasing_as_it_spends(rig: Rig) -> None:
    client = openai.OpenAI(base_url=rig.base_url + "/openai/v1", api_key=rig.key)
    remaining = []
    started = time.monotonic()
    for _ in range(5):
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-5.4-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=20
        )
        assert raw.parse().choices[0].message.content == "hello"
        headers = raw.headers
        assert headers["x-ratelimit-limit-requests"] == str(LIMIT), "the caller's, not the account's"
        remaining.append(int(headers["x-ratelimit-remaining-requests"]))
        reset = go_duration_s(headers["x-ratelimit-reset-requests"])
        assert 0 < reset <= LIMIT * REFILL_S
        # The demo principal has no token rate of its own: no token headers (and not the account's).
        assert "x-ratelimit-limit-tokens" not in headers
        assert "x-ratelimit-remaining-tokens" not in headers
    elapsed = time.monotonic() - started
    assert 4999 not in remaining, "the provider's figure never reaches the caller"
    assert all(0 <= r < LIMIT for r in remaining)
    # Four more calls spent four requests; at most one came back per 500 ms meanwhile.
    assert remaining[-1] <= remaining[0] - 4 + math.ceil(elapsed / REFILL_S), (remaining, elapsed)

    # A stream carries them in its head, before the first chunk is read.
    with client.chat.completions.with_streaming_response.create(
        model="gpt-5.4-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=20, stream=True
    ) as streamed:
        assert streamed.headers["x-ratelimit-limit-requests"] == str(LIMIT)
        assert int(streamed.headers["x-ratelimit-remaining-requests"]) < LIMIT
        chunks = list(streamed.parse())
        assert chunks


def test_anthropic_raw_response_carries_them_in_anthropics_spelling(rig: Rig) -> None:
    client = anthropic.Anthropic(base_url=rig.base_url + "/anthropic", api_key=rig.key)
    remaining = []
    started = time.monotonic()
    for _ in range(3):
        before = datetime.now(timezone.utc).replace(microsecond=0)
        raw = client.messages.with_raw_response.create(
            model="claude-sonnet-5", max_tokens=20, messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.parse().content[0].type == "text"
        headers = raw.headers
        assert headers["anthropic-ratelimit-requests-limit"] == str(LIMIT)
        remaining.append(int(headers["anthropic-ratelimit-requests-remaining"]))
        reset = datetime.fromisoformat(headers["anthropic-ratelimit-requests-reset"].replace("Z", "+00:00"))
        assert reset.tzinfo is not None and reset.utcoffset().total_seconds() == 0
        assert 0 <= (reset - before).total_seconds() <= LIMIT * REFILL_S + 1
        assert not [name for name in headers if name.lower().startswith("x-ratelimit-")]
        assert "anthropic-ratelimit-tokens-limit" not in headers
    elapsed = time.monotonic() - started
    assert remaining[-1] <= remaining[0] - 2 + math.ceil(elapsed / REFILL_S), (remaining, elapsed)
