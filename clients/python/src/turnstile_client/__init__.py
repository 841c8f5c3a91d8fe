"""Client for the turnstile admission service (`turnstile serve`), sync and asyncio.

    from turnstile_client import Client

    with Client("http://127.0.0.1:8686", key) as client:
        with client.admission(provider_id="llm-subagent", budget_id="invocation-42",
                              estimate={"tokens": 800, "cost_usd": 0.01}, wait_ms=5000) as lease:
            answer = call_model()
            lease.report_usage(tokens=answer.tokens, cost_usd=answer.cost)

        with client.events("demo", max_events=10) as events:  # the workspace's live feed
            for event in events:  # Update or Lagged
                ...

The client does not log.
"""

from ._async import AsyncAdmission, AsyncClient, AsyncLease
from ._core import outcome_for
from ._errors import (
    ApiError,
    AuthError,
    BadRequest,
    Conflict,
    Forbidden,
    LeaseLost,
    NotFound,
    OutcomeUnknown,
    Refused,
    RetryAfter,
    TurnstileError,
    Unavailable,
    retry_after_ms_of,
)
from ._events import AsyncEventStream, Event, EventStream, Lagged, SseEvent, SseParser, Update
from ._sync import Admission, Client, Lease
from ._types import (
    OPERATIONS,
    ActualUsage,
    Binding,
    BindingCount,
    BreakerTransition,
    Estimate,
    Evidence,
    Fairness,
    FairnessView,
    FeedUpdate,
    LaneView,
    WorkspaceEntry,
    WorkspaceList,
    Limits,
    Outcome,
    Priority,
    Profile,
    Reason,
    ReleaseResult,
    Snapshot,
)

__version__ = "0.1.0"

__all__ = [
    "OPERATIONS",
    "ActualUsage",
    "Admission",
    "ApiError",
    "AsyncAdmission",
    "AsyncClient",
    "AsyncEventStream",
    "AsyncLease",
    "AuthError",
    "BadRequest",
    "Binding",
    "BindingCount",
    "BreakerTransition",
    "Client",
    "Conflict",
    "Estimate",
    "Event",
    "EventStream",
    "Evidence",
    "Fairness",
    "FairnessView",
    "FeedUpdate",
    "Forbidden",
    "Lagged",
    "LaneView",
    "WorkspaceEntry",
    "WorkspaceList",
    "Lease",
    "LeaseLost",
    "Limits",
    "NotFound",
    "Outcome",
    "OutcomeUnknown",
    "Priority",
    "Profile",
    "Reason",
    "Refused",
    "ReleaseResult",
    "RetryAfter",
    "Snapshot",
    "SseEvent",
    "SseParser",
    "TurnstileError",
    "Unavailable",
    "Update",
    "outcome_for",
    "retry_after_ms_of",
]
