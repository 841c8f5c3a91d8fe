"""What the sync and the asyncio client share: request building, answer parsing, lease state.

Nothing here does I/O; `_sync.py` and `_async.py` send the requests built here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, cast
from urllib.parse import quote

import httpx

from ._errors import (
    ApiError,
    BadRequest,
    Refused,
    Unavailable,
    _header_ms,
    error_from_response,
    retry_after_ms_of,
)
from ._types import (
    ESTIMATE_WIRE_KEYS,
    ActualUsage,
    AdmissionRequest,
    Estimate,
    Evidence,
    LeaseBody,
    Outcome,
    ReleaseRequest,
    ReleaseResult,
    WireEstimate,
)

# The service's largest `deadlineMs` by default (`admission.max_wait_ms`): when the caller does
# not say how long it waits, the HTTP read timeout must outlast any server-side wait.
DEFAULT_MAX_WAIT_MS = 300_000
OUTCOMES = ("success", "failure", "retry-after", "none")
_REJECTION_STATUSES = (403, 409, 422, 429, 503)


@dataclass(frozen=True)
class Call:
    """One HTTP request to send."""

    method: str
    path: str
    body: Any = None
    has_body: bool = False
    timeout: httpx.Timeout | None = None


def segment(value: str) -> str:
    """A path segment, percent-encoded (IDs are validated by the service)."""
    if not isinstance(value, str) or not value:
        raise ValueError("an ID must be a non-empty string")
    return quote(value, safe="")


def approval(body: dict[str, Any], note: str | None, approved_by: str | None) -> dict[str, Any]:
    """`body` with the approval on record of a revision change (`note`, `approvedBy`) when
    given; the service checks them (422 `invalid-request` naming the field)."""
    if note is not None:
        body["note"] = note
    if approved_by is not None:
        body["approvedBy"] = approved_by
    return body


def wire_estimate(estimate: Estimate | Mapping[str, Any] | None) -> WireEstimate:
    """The snake_case estimate as the service's camelCase `Estimate` object."""
    if estimate is None:
        return {}
    if not isinstance(estimate, Mapping):
        raise TypeError("estimate must be a mapping such as {'tokens': 800, 'cost_usd': 0.01}")
    wire: dict[str, Any] = {}
    for key, value in estimate.items():
        wire_key = ESTIMATE_WIRE_KEYS.get(key)
        if wire_key is None:
            hint = next((k for k, w in ESTIMATE_WIRE_KEYS.items() if w == key), None)
            extra = f" (did you mean {hint!r}?)" if hint else ""
            known = ", ".join(sorted(ESTIMATE_WIRE_KEYS))
            raise ValueError(f"unknown estimate key {key!r}{extra}; known: {known}")
        wire[wire_key] = value
    return cast(WireEstimate, wire)


def check_wait_ms(wait_ms: int | None) -> None:
    if wait_ms is None:
        return
    if isinstance(wait_ms, bool) or not isinstance(wait_ms, int) or wait_ms < 0:
        raise ValueError("wait_ms must be an int >= 0 (milliseconds) or None")


def check_retry_after_ms(retry_after_ms: int) -> None:
    if isinstance(retry_after_ms, bool) or not isinstance(retry_after_ms, int) or retry_after_ms < 0:
        raise ValueError("retry_after_ms must be an int >= 0 (milliseconds)")


def acquire_call(
    provider_id: str,
    budget_id: str,
    estimate: Estimate | Mapping[str, Any] | None,
    wait_ms: int | None,
    timeout: float,
) -> Call:
    check_wait_ms(wait_ms)
    body: AdmissionRequest = {
        "providerId": provider_id,
        "budgetId": budget_id,
        "estimate": wire_estimate(estimate),
    }
    if wait_ms is not None:
        body["deadlineMs"] = wait_ms
    waited = wait_ms if wait_ms is not None else DEFAULT_MAX_WAIT_MS
    read = timeout + waited / 1000
    return Call("POST", "/v1/admissions", body, True, httpx.Timeout(timeout, read=read))


def transport_error(error: httpx.HTTPError) -> Unavailable:
    kind = "timeout" if isinstance(error, httpx.TimeoutException) else "unreachable"
    return Unavailable(None, kind, f"{type(error).__name__}: {error}")


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def parse_json(response: httpx.Response, ok: tuple[int, ...] = (200,)) -> Any:
    """The JSON body of a successful answer, or the typed exception."""
    body = _json(response)
    if response.status_code in ok:
        if not isinstance(body, dict):
            raise ApiError(response.status_code, "invalid-response", "the answer is not a JSON object")
        return body
    raise error_from_response(
        response.status_code,
        body if isinstance(body, dict) else None,
        response.text,
        response.headers,
    )


def parse_text(response: httpx.Response) -> str:
    if response.status_code == 200:
        return response.text
    raise error_from_response(response.status_code, _json(response) or None, response.text, response.headers)


def parse_acquire(response: httpx.Response) -> LeaseBody:
    """A granted lease, or `Refused` for a typed rejection, or the typed error."""
    body = _json(response)
    status = response.status_code
    if status == 200 and isinstance(body, dict) and isinstance(body.get("leaseId"), str):
        return cast(LeaseBody, body)
    if status in _REJECTION_STATUSES and isinstance(body, dict) and "reason" in body:
        evidence = cast(Evidence, body.get("evidence") or {})
        hint = evidence.get("retryAfterMs")
        retry_after_ms = hint if isinstance(hint, int) else _header_ms(response.headers)
        raise Refused(
            status,
            str(body["reason"]),
            bool(body.get("retryable", False)),
            evidence,
            retry_after_ms,
        )
    return cast(LeaseBody, parse_json(response))


def outcome_for(error: BaseException | None) -> tuple[Outcome, int | None]:
    """The release outcome for how an admission block ended.

    Normal exit: `success`. An `Exception` carrying a provider Retry-After (see
    `retry_after_ms_of`): `retry-after`. Any other `Exception`: `failure`. A `BaseException`
    that is not an `Exception` (task cancellation, KeyboardInterrupt, SystemExit): `none`, so
    that a caller giving up does not count against the provider's circuit breaker.
    """
    if error is None:
        return "success", None
    if not isinstance(error, Exception):
        return "none", None
    retry_after = retry_after_ms_of(error)
    if retry_after is not None:
        return "retry-after", retry_after
    return "failure", None


class LeaseState:
    """A granted lease: its ID, TTL, evidence, the usage to report, and how it ended."""

    def __init__(self, body: LeaseBody, provider_id: str, budget_id: str, heartbeat_fraction: float) -> None:
        self.lease_id: str = body["leaseId"]
        self.ttl_ms: int = int(body.get("ttlMs", 0))
        self.expires_at_epoch_ms: int = int(body.get("expiresAtEpochMs", 0))
        self.evidence: Evidence = body.get("evidence", cast(Evidence, {}))
        self.provider_id = provider_id
        self.budget_id = budget_id
        self.released = False
        """True once a release was acknowledged by the service."""
        self.lost = False
        """True once the service said the lease is gone (404 on heartbeat or release)."""
        self.release_error: BaseException | None = None
        """Why the release at the end of an admission block failed (that release never raises)."""
        self.release_result: ReleaseResult | None = None
        self.heartbeats = 0
        """Heartbeats acknowledged by the service."""
        self._usage: ActualUsage = {}
        self._fraction = heartbeat_fraction

    def __repr__(self) -> str:
        return f"<Lease {self.lease_id} ttl_ms={self.ttl_ms} released={self.released} lost={self.lost}>"

    @property
    def heartbeat_interval_s(self) -> float:
        return max(self.ttl_ms * self._fraction, 10.0) / 1000.0

    def report_usage(self, tokens: int | None = None, cost_usd: float | None = None) -> None:
        """What the call actually used; sent as `actualUsage` on release (each value replaces
        the lease's estimate in the invocation's budgets). Later calls overwrite given values."""
        if tokens is not None:
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                raise ValueError("tokens must be an int >= 0")
            self._usage["tokens"] = tokens
        if cost_usd is not None:
            if (
                isinstance(cost_usd, bool)
                or not isinstance(cost_usd, (int, float))
                or not math.isfinite(cost_usd)
                or cost_usd < 0
            ):
                raise ValueError("cost_usd must be a finite number >= 0")
            self._usage["costUsd"] = float(cost_usd)

    @property
    def usage(self) -> ActualUsage:
        """The usage reported so far (wire spelling)."""
        return cast(ActualUsage, dict(self._usage))

    def release_call(self, outcome: Outcome, retry_after_ms: int | None, timeout: float) -> Call:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}")
        body: ReleaseRequest = {"outcome": outcome}
        if outcome == "retry-after":
            if retry_after_ms is None:
                raise ValueError("outcome 'retry-after' needs retry_after_ms")
            check_retry_after_ms(retry_after_ms)
            body["retryAfterMs"] = retry_after_ms
        elif retry_after_ms is not None:
            raise ValueError("retry_after_ms is only allowed with outcome 'retry-after'")
        if self._usage:
            body["actualUsage"] = self.usage
        return Call("POST", f"/v1/leases/{segment(self.lease_id)}/release", body, True, httpx.Timeout(timeout))

    @staticmethod
    def fallback_call(call: Call, error: BaseException) -> Call | None:
        """After a 4xx on the implicit release: the same release without the refused part, so
        that the slot is freed now rather than at the TTL (e.g. a provider Retry-After above
        the service's `admission.max_retry_after_ms`)."""
        if not isinstance(error, BadRequest) or not isinstance(call.body, dict):
            return None
        body = dict(call.body)
        field = error.field or ""
        if field.startswith("actualUsage") and "actualUsage" in body:
            del body["actualUsage"]
        elif field == "retryAfterMs" and body.get("outcome") == "retry-after":
            body.pop("retryAfterMs", None)
            body["outcome"] = "failure"
        else:
            return None
        return Call(call.method, call.path, body, True, call.timeout)

    def heartbeat_call(self, timeout: float) -> Call:
        return Call("POST", f"/v1/leases/{segment(self.lease_id)}/heartbeat", None, False, httpx.Timeout(timeout))
