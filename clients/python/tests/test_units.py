"""Pure functions, without a service: outcome and Retry-After detection, estimate spelling,
argument checks."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import time

import httpx
import pytest

from turnstile_client import Client, Refused, RetryAfter, outcome_for, retry_after_ms_of
from turnstile_client._core import wire_estimate


class WithMs(Exception):
    retry_after_ms = 1500


class WithSeconds(Exception):
    def __init__(self, seconds: object) -> None:
        super().__init__("rate limited")
        self.retry_after = seconds


class SdkError(Exception):
    """Like the OpenAI / Anthropic SDKs' errors: an httpx response with headers."""

    def __init__(self, headers: dict[str, str]) -> None:
        super().__init__("429")
        self.response = httpx.Response(429, headers=headers)


def test_outcome_of_a_normal_exit_is_success() -> None:
    assert outcome_for(None) == ("success", None)


def test_outcome_of_an_exception_is_failure() -> None:
    assert outcome_for(ValueError("boom")) == ("failure", None)


def test_outcome_of_a_cancellation_or_interrupt_is_none() -> None:
    assert outcome_for(asyncio.CancelledError()) == ("none", None)
    assert outcome_for(KeyboardInterrupt()) == ("none", None)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (WithMs(), 1500),
        (RetryAfter(2500), 2500),
        (WithSeconds(2), 2000),
        (WithSeconds(0.25), 250),
        (WithSeconds(datetime.timedelta(seconds=3)), 3000),
        (SdkError({"retry-after-ms": "1234"}), 1234),
        (SdkError({"Retry-After": "7"}), 7000),
    ],
)
def test_retry_after_is_read_from_attributes_and_response_headers(error: Exception, expected: int) -> None:
    assert retry_after_ms_of(error) == expected
    assert outcome_for(error) == ("retry-after", expected)


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    found = retry_after_ms_of(SdkError({"retry-after": when}))
    assert found is not None and 25_000 <= found <= 31_000


@pytest.mark.parametrize(
    "error",
    [
        ValueError("plain"),
        WithSeconds(-1),
        WithSeconds(True),
        WithSeconds("soon"),
        WithSeconds(float("nan")),
        SdkError({"retry-after": "whenever"}),
        SdkError({}),
    ],
)
def test_no_or_malformed_retry_after_is_a_failure(error: Exception) -> None:
    assert retry_after_ms_of(error) is None
    assert outcome_for(error) == ("failure", None)


def test_a_refusal_by_turnstile_is_not_a_provider_retry_after() -> None:
    refused = Refused(429, "queue-full", True, {}, 1000)
    assert retry_after_ms_of(refused) is None
    assert outcome_for(refused) == ("failure", None)


def test_estimate_keys_are_snake_case_and_sent_camel_case() -> None:
    assert wire_estimate({"tokens": 800, "cost_usd": 0.01, "request_bytes": 10, "batch_size": 2, "retained_work": 1}) == {
        "tokens": 800,
        "costUsd": 0.01,
        "requestBytes": 10,
        "batchSize": 2,
        "retainedWork": 1,
    }
    assert wire_estimate(None) == {}


def test_an_unknown_estimate_key_is_refused_with_a_hint() -> None:
    with pytest.raises(ValueError, match="did you mean 'cost_usd'"):
        wire_estimate({"costUsd": 0.01})
    with pytest.raises(ValueError, match="unknown estimate key 'budget'"):
        wire_estimate({"budget": 1})


def test_arguments_are_checked_before_any_request() -> None:
    client = Client("http://127.0.0.1:9", "tsk_x")
    with pytest.raises(ValueError, match="wait_ms"):
        client.admission("p", "b", {}, wait_ms=-1)
    with pytest.raises(ValueError, match="retry_after_ms"):
        client.pause_provider("p", -5)
    with pytest.raises(ValueError, match="tokens"):
        client.release("0" * 32, tokens=-1)
    with pytest.raises(ValueError, match="retry_after_ms"):
        client.release("0" * 32, "retry-after")
    with pytest.raises(ValueError, match="heartbeat_fraction"):
        Client("http://127.0.0.1:9", "k", heartbeat_fraction=1.5)
    client.close()


def test_an_unknown_write_outcome_is_its_own_unavailable_error() -> None:
    from turnstile_client import OutcomeUnknown, Unavailable
    from turnstile_client._errors import error_from_response

    unknown = error_from_response(
        503, {"error": "coordination-outcome-unknown", "message": "m"}, "", {"retry-after": "1"}
    )
    assert isinstance(unknown, OutcomeUnknown) and isinstance(unknown, Unavailable)
    assert unknown.error == "coordination-outcome-unknown" and unknown.retry_after_ms == 1000
    refused = error_from_response(503, {"error": "coordination-unavailable", "message": "m"}, "", {})
    assert isinstance(refused, Unavailable) and not isinstance(refused, OutcomeUnknown)
