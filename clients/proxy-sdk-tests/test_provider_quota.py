"""The provider's announced quota (issue 32, item 1), with the official SDKs unmodified.

The fake upstream's `quota-requests=R/MS` directive makes an answer carry the provider's own
rate-limit headers (OpenAI `x-ratelimit-*`, Anthropic `anthropic-ratelimit-*`). A lane told
"0 requests left, reset in 2 s" holds its next call until the reset: the fake sees that call
arrive only after it. The window lapses at the reset, so later tests find the lane free.
"""

from __future__ import annotations

import time

from conftest import Rig
from test_sdks import LANE, ant, oai

RESET_MS = 2000


def arrivals(rig: Rig) -> list[float]:
    return [a["at_ms"] for a in rig.fake_stats()["arrivals"]]


def test_openai_a_lane_told_zero_requests_left_holds_the_next_call_until_the_reset(rig: Rig) -> None:
    client = oai(rig)
    observed = rig.metric(f"turnstile_proxy_quota_observations_total{{{LANE}}}")
    before = len(arrivals(rig))
    told = client.chat.completions.create(
        model="gpt-5.4-mini",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=50,
        extra_headers={"x-fake-script": f"quota-requests=0/{RESET_MS}"},
    )
    assert told.choices[0].message.content == "hello"
    assert rig.metric(f"turnstile_proxy_quota_observations_total{{{LANE}}}") == observed + 1
    started = time.monotonic()
    held = client.chat.completions.create(
        model="gpt-5.4-mini",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=50,
    )
    waited_ms = (time.monotonic() - started) * 1000
    assert held.choices[0].message.content == "hello"
    first, second = arrivals(rig)[before:]
    # The reset is counted from when turnstile read the answer's head, just after `first`.
    assert second - first >= RESET_MS - 50, (first, second)
    assert waited_ms >= RESET_MS - 150, waited_ms
    assert waited_ms < RESET_MS + 3000, "held until the reset, not longer"


def test_anthropic_a_streamed_answers_quota_is_read_before_its_first_byte_is_relayed(rig: Rig) -> None:
    client = ant(rig)
    before = len(arrivals(rig))
    # A stream that says "0 requests left for 2 s" in its head, then stalls 3.5 s after its
    # first content chunk: its end comes well after the reset.
    stream = client.messages.create(
        model="claude-sonnet-5",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        extra_headers={"x-fake-script": f"quota-requests=0/{RESET_MS},chunks=2,stall-ms=3500"},
    )
    events = iter(stream)
    first_event = next(events)
    assert first_event.type == "message_start"
    # The first bytes reached the client, so the head was read: a call made now is held until
    # the reset, while the stream is still open.
    started = time.monotonic()
    held = client.messages.create(
        model="claude-sonnet-5",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
    )
    waited_ms = (time.monotonic() - started) * 1000
    assert held.content[0].type == "text"
    rest = list(events)
    assert rest[-1].type == "message_stop"
    streamed, second = arrivals(rig)[before:]
    assert second - streamed >= RESET_MS - 50, (streamed, second)
    assert second - streamed < 3500, "held by the head's quota, not by the end of the stream"
    assert waited_ms >= RESET_MS - 400, waited_ms
