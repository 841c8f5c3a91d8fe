"""The official SDKs, unmodified, through turnstile's proxy mode."""

from __future__ import annotations

import time
import uuid

import anthropic
import openai
import pytest

from conftest import ANTHROPIC_UPSTREAM_KEY, OPENAI_UPSTREAM_KEY, Rig

LANE = 'lane="llm-subagent"'


def oai(rig: Rig, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=rig.base_url + "/openai/v1", api_key=rig.key, **kwargs)  # type: ignore[arg-type]


def ant(rig: Rig, **kwargs: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=rig.base_url + "/anthropic", api_key=rig.key, **kwargs)  # type: ignore[arg-type]


def test_openai_plain_chat(rig: Rig) -> None:
    completion = oai(rig).chat.completions.create(
        model="gpt-5.4-mini",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=50,
        extra_headers={"x-fake-script": "usage=12/34"},
    )
    assert completion.choices[0].message.content == "hello"
    assert completion.usage is not None and completion.usage.completion_tokens == 34
    stats = rig.fake_stats()
    assert stats["last_authorization"] == f"Bearer {OPENAI_UPSTREAM_KEY}"
    assert not stats["saw_turnstile_key"]


def test_openai_streamed_chat_with_and_without_usage(rig: Rig) -> None:
    client = oai(rig)
    chunks = list(
        client.chat.completions.create(
            model="gpt-5.4-mini",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=50,
            stream=True,
            extra_headers={"x-fake-script": "chunks=4,usage=5/6"},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 "
    assert all(c.usage is None for c in chunks), "the injected usage chunk is stripped"
    chunks = list(
        client.chat.completions.create(
            model="gpt-5.4-mini",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=50,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-fake-script": "chunks=2,usage=5/6"},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_openai_embeddings_and_models(rig: Rig) -> None:
    client = oai(rig)
    result = client.embeddings.create(model="text-embedding-3-small", input="hello", extra_headers={"x-fake-script": "usage=3/0"})
    assert len(result.data[0].embedding) == 3
    assert result.usage.prompt_tokens == 3
    names = {m.id for m in client.models.list()}
    assert {"gpt-5.4-mini", "text-embedding-3-small"} <= names


def test_openai_unknown_model_is_not_found(rig: Rig) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        oai(rig).chat.completions.create(model="gpt-nope", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.code == "model_not_found"


def test_anthropic_plain_and_streamed_messages(rig: Rig) -> None:
    client = ant(rig)
    message = client.messages.create(
        model="claude-sonnet-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-fake-script": "usage=20/30"},
    )
    assert message.content[0].text == "hello"  # type: ignore[union-attr]
    assert message.usage.output_tokens == 30
    assert rig.fake_stats()["last_api_key"] == ANTHROPIC_UPSTREAM_KEY
    with client.messages.stream(
        model="claude-sonnet-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-fake-script": "chunks=3,usage=20/30"},
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "tok0 tok1 tok2 "
    assert final.usage.output_tokens == 30


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_an_upstream_429_is_retried_by_the_sdk_after_the_advertised_time(rig: Rig, sdk: str) -> None:
    script = f"status=429,retry-after-ms=700,once={uuid.uuid4()}"
    before = rig.fake_stats()["requests"]
    started = time.monotonic()
    if sdk == "openai":
        completion = oai(rig, max_retries=2).chat.completions.create(
            model="gpt-5.4-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=5, extra_headers={"x-fake-script": script}
        )
        assert completion.choices[0].message.content == "hello"
    else:
        message = ant(rig, max_retries=2).messages.create(
            model="claude-sonnet-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}], extra_headers={"x-fake-script": script}
        )
        assert message.content[0].text == "hello"  # type: ignore[union-attr]
    elapsed = time.monotonic() - started
    stats = rig.fake_stats()
    assert stats["requests"] - before == 2, "one 429, then one retried call"
    first, second = stats["arrivals"][-2:]
    # The SDK waited the advertised 700 ms (turnstile's retry-after-ms), and the lane was paused
    # for that long: the retry reached the upstream no earlier.
    assert second["at_ms"] - first["at_ms"] >= 650, (first, second)
    assert elapsed >= 0.65


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_refusal_that_waiting_cannot_fix_is_not_retried(rig: Rig, sdk: str) -> None:
    # One call whose reported usage spends the demo principal's $5 budget (3M output tokens at
    # $2/M, or 400k at $15/M); the next call on the same budget is refused with
    # x-should-retry: false, and the SDK gives up at once.
    budget = {"x-turnstile-budget-id": f"inv-{uuid.uuid4()}"}
    refused = f'turnstile_proxy_calls_total{{{LANE},class="refused"}}'
    if sdk == "openai":
        client = oai(rig, max_retries=2)
        call = lambda script: client.chat.completions.create(  # noqa: E731
            model="gpt-5.4-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
            extra_headers={**budget, "x-fake-script": script},
        )
        error: type[Exception] = openai.RateLimitError
        spend = "usage=0/3000000"
    else:
        client_a = ant(rig, max_retries=2)
        call = lambda script: client_a.messages.create(  # noqa: E731
            model="claude-sonnet-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}],
            extra_headers={**budget, "x-fake-script": script},
        )
        error = anthropic.RateLimitError
        spend = "usage=0/400000"
    call(spend)
    before = rig.metric(refused)
    upstream_before = rig.fake_stats()["requests"]
    with pytest.raises(error) as raised:
        call("")
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert raised.value.response.headers["x-turnstile-reason"] == "cost"
    assert rig.metric(refused) - before == 1, "exactly one attempt reached turnstile"
    assert rig.fake_stats()["requests"] == upstream_before
