"""Typed exceptions, and how the client reads a Retry-After off a host's exception."""

from __future__ import annotations

import email.utils
import math
import time
from typing import Any, Mapping

from ._types import Evidence, Reason


class TurnstileError(Exception):
    """Base of every exception the client raises."""


class Refused(TurnstileError):
    """The service refused the admission (a typed rejection: 403, 409, 422, 429 or 503).

    `reason` is the core's reason (`queue-full`, `tokens-per-second`, `retry-after`, ...),
    `retryable` whether the *same* request may succeed later, `retry_after_ms` the service's
    hint in milliseconds (the evidence's `retryAfterMs`, else the `Retry-After` header), and
    `evidence` the full decision evidence.
    """

    def __init__(
        self,
        status: int,
        reason: Reason | str,
        retryable: bool,
        evidence: Evidence,
        retry_after_ms: int | None,
    ) -> None:
        hint = f", retry after {retry_after_ms} ms" if retry_after_ms is not None else ""
        super().__init__(f"admission refused: {reason} (HTTP {status}, retryable={retryable}{hint})")
        self.status = status
        self.reason = reason
        self.retryable = retryable
        self.evidence = evidence
        self.retry_after_ms = retry_after_ms

    @property
    def predicted_wait_ms(self) -> int | None:
        """On `deadline-unreachable`: the wait the lane predicted for the request, in
        milliseconds (it exceeded the deadline; `retry_after_ms` equals it). None otherwise."""
        value = self.evidence.get("predictedWaitMs")
        return value if isinstance(value, int) else None


class ApiError(TurnstileError):
    """An error answer `{error, message, field?}`; `status` is None for transport failures."""

    def __init__(
        self,
        status: int | None,
        error: str,
        message: str,
        field: str | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        where = f" (field {field})" if field else ""
        code = f"HTTP {status} " if status is not None else ""
        super().__init__(f"{code}{error}: {message}{where}")
        self.status = status
        self.error = error
        self.message = message
        self.field = field
        self.retry_after_ms = retry_after_ms


class BadRequest(ApiError):
    """400 `malformed-json`, 413 `body-too-large`, 422 `invalid-request` / `invalid-definition`.

    `field` names the offending field when the service says which.
    """


class AuthError(ApiError):
    """401: the key is missing, unknown or revoked."""


class Forbidden(ApiError):
    """403: the key is valid but may not do this (e.g. an admin key acquiring a lease)."""


class NotFound(ApiError):
    """404: unknown route, workspace without profile, unknown key, ..."""


class LeaseLost(NotFound):
    """404 `unknown-lease`: the lease was released, reclaimed after its TTL, or never granted."""


class Conflict(ApiError):
    """409 `invalid-definition`: a profile revision reused with other limits."""


class Unavailable(ApiError):
    """The service cannot answer: 503 `shutting-down` / `storage-error` /
    `coordination-unavailable` (replicas: nothing was written), or a transport failure
    (connection refused, timeout; then `status` is None and `error` is `unreachable`)."""


class OutcomeUnknown(Unavailable):
    """503 `coordination-outcome-unknown` (replicas): a key, revocation or profile write was
    sent to the shared store (Redis), which did not answer. It either applied before this answer
    or never will; once Redis answers, the keys and profiles every replica lists show which.
    Check them before writing again (a repeated key creation makes a second key)."""


class RetryAfter(Exception):
    """Raise this (or any exception with a `retry_after_ms` attribute) inside an admission
    block when the provider answered with a Retry-After: the lease is released with outcome
    `retry-after`, which pauses the provider lane for everybody in the workspace."""

    def __init__(self, retry_after_ms: int, message: str = "") -> None:
        super().__init__(message or f"provider asked to retry after {retry_after_ms} ms")
        self.retry_after_ms = retry_after_ms


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if math.isnan(value) or math.isinf(value) or value < 0:
        return None
    return float(value)


def _header_ms(headers: Any) -> int | None:
    """`retry-after-ms` (milliseconds) or `retry-after` (seconds or an HTTP date)."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    try:
        ms_text = get("retry-after-ms") or get("Retry-After-Ms")
        text = get("retry-after") or get("Retry-After")
    except Exception:  # a foreign headers object that misbehaves
        return None
    if isinstance(ms_text, str):
        try:
            ms = _number(float(ms_text.strip()))
        except ValueError:
            ms = None
        if ms is not None:
            return math.ceil(ms)
    if not isinstance(text, str):
        return None
    text = text.strip()
    try:
        seconds = _number(float(text))
    except ValueError:
        seconds = None
    if seconds is not None:
        return math.ceil(seconds * 1000)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0, math.ceil((when.timestamp() - time.time()) * 1000))


def retry_after_ms_of(error: BaseException) -> int | None:
    """The provider's Retry-After carried by `error`, in milliseconds, or None.

    Looked up in this order: an attribute `retry_after_ms` (milliseconds), an attribute
    `retry_after` (seconds, or a `timedelta`), then the headers of an attribute `response`
    (as on httpx / requests / OpenAI / Anthropic SDK errors) or `headers`: `retry-after-ms`,
    then `retry-after` (seconds or an HTTP date). The client's own exceptions never count: a
    refusal by turnstile is not the provider asking to slow down.
    """
    if isinstance(error, TurnstileError):
        return None
    ms = _number(getattr(error, "retry_after_ms", None))
    if ms is not None:
        return math.ceil(ms)
    seconds_attr = getattr(error, "retry_after", None)
    total_seconds = getattr(seconds_attr, "total_seconds", None)
    if callable(total_seconds):
        seconds_attr = total_seconds()
    seconds = _number(seconds_attr)
    if seconds is not None:
        return math.ceil(seconds * 1000)
    response = getattr(error, "response", None)
    for headers in (getattr(response, "headers", None), getattr(error, "headers", None)):
        if headers is not None:
            found = _header_ms(headers)
            if found is not None:
                return found
    return None


def error_from_response(
    status: int, body: Mapping[str, Any] | None, text: str, headers: Mapping[str, str]
) -> ApiError:
    """The typed exception for a non-success answer that is not a rejection."""
    error = str(body.get("error", "")) if body else ""
    message = str(body.get("message", "")) if body else ""
    field = body.get("field") if body else None
    retry_after = _header_ms(headers)
    if not error:
        error = f"http-{status}"
        message = message or text[:200]
    kind: type[ApiError]
    if status in (400, 413, 422):
        kind = BadRequest
    elif status == 401:
        kind = AuthError
    elif status == 403:
        kind = Forbidden
    elif status == 404:
        kind = LeaseLost if error == "unknown-lease" else NotFound
    elif status == 409:
        kind = Conflict
    elif status == 503:
        kind = OutcomeUnknown if error == "coordination-outcome-unknown" else Unavailable
    else:
        kind = ApiError
    return kind(status, error, message, field if isinstance(field, str) else None, retry_after)
