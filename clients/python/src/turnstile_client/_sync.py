"""The synchronous client: `Client`, `Lease` (heartbeats on a background thread)."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, Mapping, cast

import httpx

from . import _core
from ._core import Call, LeaseState, approval, segment
from ._errors import LeaseLost, TurnstileError
from ._events import EventStream, events_request
from ._types import (
    BreakerHistory,
    BudgetReleaseResult,
    FairnessView,
    CreatedKey,
    CreateKeyRequest,
    Estimate,
    HeartbeatResult,
    JsonObject,
    KeyListing,
    KeyRevocation,
    Outcome,
    PauseHistory,
    PauseResult,
    Profile,
    ProfileChangeRecord,
    ProfileHistory,
    ProfileRevision,
    ProfileUnchanged,
    ReleaseResult,
    RetryAfterRequest,
    Rollout,
    RolloutHistory,
    RolloutMode,
    RolloutRecord,
    RolloutStartRequest,
    Snapshot,
    WorkspaceList,
)


class Lease(LeaseState):
    """A granted lease. Heartbeats run on a daemon thread until the lease is released.

    Use it as a context manager (or through `Client.admission`): on exit it is released with
    outcome `success`, `retry-after` or `failure` (see `outcome_for`), never raising; a failed
    release is kept in `release_error`. `release()` called directly raises.
    """

    def __init__(
        self, client: Client, body: Any, provider_id: str, budget_id: str, heartbeat: bool
    ) -> None:
        super().__init__(body, provider_id, budget_id, client._heartbeat_fraction)
        self._client = client
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if heartbeat:
            self._thread = threading.Thread(target=self._beat, name="turnstile-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_s):
            try:
                self.heartbeat()
            except LeaseLost:
                return
            except TurnstileError:
                continue  # transient (unreachable, 503): try again at the next interval

    def _stop_heartbeats(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._client._timeout + 1)

    def heartbeat(self) -> HeartbeatResult:
        """Move the expiry to now + TTL (the background thread does this on its own)."""
        try:
            answer = cast(HeartbeatResult, self._client._json(self.heartbeat_call(self._client._timeout)))
        except LeaseLost:
            if not self._stop.is_set():
                self.lost = True
            raise
        self.expires_at_epoch_ms = int(answer.get("expiresAtEpochMs", self.expires_at_epoch_ms))
        self.heartbeats += 1
        return answer

    def release(self, outcome: Outcome = "success", retry_after_ms: int | None = None) -> ReleaseResult:
        """Release now with this outcome (and the reported usage); raises on failure.

        A second release returns the first one's result without asking the service again.
        """
        with self._lock:
            if self.release_result is not None:
                return self.release_result
            call = self.release_call(outcome, retry_after_ms, self._client._timeout)
            self._stop_heartbeats()
            try:
                result = cast(ReleaseResult, self._client._json(call))
            except LeaseLost:
                self.lost = True
                raise
            self.released = True
            self.release_result = result
            return result

    def _release_quietly(self, error: BaseException | None) -> None:
        if self.release_result is not None:
            return
        outcome, retry_after_ms = _core.outcome_for(error)
        try:
            self.release(outcome, retry_after_ms)
        except Exception as failed:  # noqa: BLE001 - kept for the caller, never raised here
            self.release_error = failed
            retry = self.fallback_call(self.release_call(outcome, retry_after_ms, self._client._timeout), failed)
            if retry is not None:
                try:
                    self.release_result = cast(ReleaseResult, self._client._json(retry))
                    self.released = True
                except Exception:  # noqa: BLE001
                    pass

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release_quietly(exc)


class Admission:
    """`with client.admission(...) as lease:` acquires on enter and releases on exit."""

    def __init__(self, client: Client, args: dict[str, Any]) -> None:
        self._client = client
        self._args = args
        self._lease: Lease | None = None

    def __enter__(self) -> Lease:
        self._lease = self._client.acquire(**self._args)
        return self._lease

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._lease is not None:
            self._lease.__exit__(exc_type, exc, tb)


class Client:
    """A client of `turnstile serve` with one key (a principal key `tsk_...` for admissions,
    or the admin key `tsa_...` for profiles and keys).

    `timeout` (seconds) bounds every request; an admission's read timeout adds how long it
    may wait. `heartbeat_fraction` of the lease's `ttlMs` is the heartbeat interval.
    Thread-safe; close it (or use it as a context manager) to close its connections.
    """

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float = 10.0,
        heartbeat_fraction: float = 1 / 3,
        http: httpx.Client | None = None,
    ) -> None:
        if not 0 < heartbeat_fraction < 1:
            raise ValueError("heartbeat_fraction must be between 0 and 1")
        self._timeout = timeout
        self._heartbeat_fraction = heartbeat_fraction
        self._owns_http = http is None
        self._http = http or httpx.Client()
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: Call) -> httpx.Response:
        try:
            return self._http.request(
                call.method,
                self._base + call.path,
                headers=self._headers,
                json=call.body if call.has_body else None,
                timeout=call.timeout or httpx.Timeout(self._timeout),
            )
        except httpx.HTTPError as error:
            raise _core.transport_error(error) from error

    def _json(self, call: Call, ok: tuple[int, ...] = (200,)) -> Any:
        return _core.parse_json(self._send(call), ok)

    # Admission.

    def admission(
        self,
        provider_id: str,
        budget_id: str,
        estimate: Estimate | Mapping[str, Any] | None = None,
        wait_ms: int | None = None,
        *,
        heartbeat: bool = True,
    ) -> Admission:
        """A context manager: acquires a lease on enter (raising `Refused` when refused) and
        releases it on exit. `wait_ms` is how long the service may queue the request
        (`deadlineMs`; None: the service's `admission.default_wait_ms`)."""
        _core.check_wait_ms(wait_ms)
        return Admission(
            self,
            dict(provider_id=provider_id, budget_id=budget_id, estimate=estimate, wait_ms=wait_ms, heartbeat=heartbeat),
        )

    def acquire(
        self,
        provider_id: str,
        budget_id: str,
        estimate: Estimate | Mapping[str, Any] | None = None,
        wait_ms: int | None = None,
        *,
        heartbeat: bool = True,
    ) -> Lease:
        """`POST /v1/admissions`: a `Lease` (heartbeating unless `heartbeat=False`) or `Refused`.
        Release it with `lease.release(...)` or use it as a context manager."""
        call = _core.acquire_call(provider_id, budget_id, estimate, wait_ms, self._timeout)
        body = _core.parse_acquire(self._send(call))
        return Lease(self, body, provider_id, budget_id, heartbeat)

    def release(
        self,
        lease_id: str,
        outcome: Outcome = "success",
        retry_after_ms: int | None = None,
        *,
        tokens: int | None = None,
        cost_usd: float | None = None,
    ) -> ReleaseResult:
        """`POST /v1/leases/{leaseId}/release` by lease ID (prefer `Lease.release`)."""
        state = LeaseState({"leaseId": lease_id}, "", "", self._heartbeat_fraction)
        state.report_usage(tokens, cost_usd)
        return cast(ReleaseResult, self._json(state.release_call(outcome, retry_after_ms, self._timeout)))

    def heartbeat(self, lease_id: str) -> HeartbeatResult:
        """`POST /v1/leases/{leaseId}/heartbeat` by lease ID (leases heartbeat on their own)."""
        return cast(HeartbeatResult, self._json(Call("POST", f"/v1/leases/{segment(lease_id)}/heartbeat")))

    def release_budget(self, budget_id: str) -> BudgetReleaseResult:
        """`POST /v1/budgets/{budgetId}/release`: forget the invocation's budget (`released`
        is false if it held nothing)."""
        return cast(BudgetReleaseResult, self._json(Call("POST", f"/v1/budgets/{segment(budget_id)}/release")))

    def pause_provider(self, provider_id: str, retry_after_ms: int) -> PauseResult:
        """`POST /v1/providers/{providerId}/retry-after`: pause the provider lane."""
        _core.check_retry_after_ms(retry_after_ms)
        body: RetryAfterRequest = {"retryAfterMs": retry_after_ms}
        return cast(PauseResult, self._json(Call("POST", f"/v1/providers/{segment(provider_id)}/retry-after", body, True)))

    # Workspace reads (admin key, or a principal key of that workspace).

    def snapshot(self, workspace_id: str) -> Snapshot:
        return cast(Snapshot, self._json(Call("GET", f"/v1/workspaces/{segment(workspace_id)}/snapshot")))

    def events(self, workspace_id: str, max_events: int | None = None) -> EventStream:
        """`GET /v1/workspaces/{workspaceId}/events`: the workspace's live feed, an iterator of
        `Update` and `Lagged` events and a context manager that closes the connection.

            with client.events("demo", max_events=10) as events:
                for event in events:
                    if isinstance(event, Update):
                        print(event.lane("llm-subagent"))

        An `Update` comes at once, then one per change (at most every 250 ms) and one every
        second while nothing changes; `principals` is filled for admin keys only. The iterator
        ends after `max_events` events (1..=100000; None: no limit) or when the service shuts
        down; it does not reconnect. The request is sent when the stream is entered or first
        iterated: 401 `AuthError`, 403 `Forbidden`, 404 `NotFound` (`no-profile`), ... are
        raised there, and a broken connection (or `timeout` seconds without a byte) raises
        `Unavailable`.
        """
        return EventStream(self._http, events_request(self._http, self._base, self._headers, workspace_id, max_events, self._timeout))

    def profile_history(self, workspace_id: str) -> ProfileHistory:
        return cast(ProfileHistory, self._json(Call("GET", f"/v1/workspaces/{segment(workspace_id)}/profiles")))

    def breaker_history(self, workspace_id: str) -> BreakerHistory:
        return cast(BreakerHistory, self._json(Call("GET", f"/v1/workspaces/{segment(workspace_id)}/breakers")))

    def pause_history(self, workspace_id: str) -> PauseHistory:
        """Retry-After pauses of the workspace's provider lanes with their cause (last 64)."""
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/pauses")
        return cast(PauseHistory, self._json(call))

    def workspaces(self) -> WorkspaceList:
        """The workspaces this key may see (admin: every one with a profile; a principal key:
        its own), each with its current revision."""
        return cast(WorkspaceList, self._json(Call("GET", "/v1/workspaces")))

    def fairness(self, workspace_id: str) -> FairnessView:
        """Grants, share and mean queue delay per principal over the last five minutes (a
        principal key gets its own row only)."""
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/fairness")
        return cast(FairnessView, self._json(call))

    def profile_revision(self, workspace_id: str, profile_version: str) -> ProfileRevision:
        """A registered revision's limits (admin); sent back to `register_profile`, a rollback."""
        path = f"/v1/workspaces/{segment(workspace_id)}/profiles/{segment(profile_version)}"
        return cast(ProfileRevision, self._json(Call("GET", path)))

    # Administration (admin key).

    def register_profile(
        self,
        workspace_id: str,
        profile_version: str,
        profile: Profile | Mapping[str, Any],
        *,
        note: str | None = None,
        approved_by: str | None = None,
    ) -> ProfileChangeRecord | ProfileUnchanged:
        """Register a profile revision: the change record (201) or `{unchanged: true}` (200).
        `note` and `approved_by` are kept with the change in the audit log (the approval on
        record); a rollback is registering an earlier revision again."""
        path = f"/v1/workspaces/{segment(workspace_id)}/profiles/{segment(profile_version)}"
        body = approval(dict(profile), note, approved_by)
        return cast(ProfileChangeRecord, self._json(Call("PUT", path, body, True), ok=(200, 201)))

    # Rollouts (issue 33): a candidate revision in shadow or on a canary slice before it binds.

    def start_rollout(
        self,
        workspace_id: str,
        revision: str,
        profile: Profile | Mapping[str, Any],
        mode: RolloutMode = "shadow",
        *,
        canary_share: float | None = None,
        note: str | None = None,
        approved_by: str | None = None,
    ) -> Rollout:
        """Start a rollout (admin): `revision` is registered (not current) and tried in `mode`
        (`canary_share` of the principals with `canary`); 409 `Conflict` while one runs."""
        body: RolloutStartRequest = {"revision": revision, "profile": cast(Profile, dict(profile)), "mode": mode}
        if canary_share is not None:
            body["canaryShare"] = canary_share
        call = Call("POST", f"/v1/workspaces/{segment(workspace_id)}/rollouts", approval(dict(body), note, approved_by), True)
        return cast(Rollout, self._json(call, ok=(201,)))

    def current_rollout(self, workspace_id: str) -> Rollout:
        """The running rollout and its decision comparison (404 `NotFound` `no-rollout`)."""
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/rollouts/current")
        return cast(Rollout, self._json(call))

    def promote_rollout(
        self, workspace_id: str, *, note: str | None = None, approved_by: str | None = None
    ) -> RolloutRecord:
        """Promote the running rollout's candidate (admin): it becomes the current revision."""
        path = f"/v1/workspaces/{segment(workspace_id)}/rollouts/current/promote"
        return cast(RolloutRecord, self._json(Call("POST", path, approval({}, note, approved_by), True)))

    def abort_rollout(
        self, workspace_id: str, *, note: str | None = None, approved_by: str | None = None
    ) -> RolloutRecord:
        """Abort the running rollout (admin): the current revision stays."""
        path = f"/v1/workspaces/{segment(workspace_id)}/rollouts/current/abort"
        return cast(RolloutRecord, self._json(Call("POST", path, approval({}, note, approved_by), True)))

    def rollout_history(self, workspace_id: str) -> RolloutHistory:
        """Rollout records (started, promoted, aborted) with their approval, oldest first."""
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/rollouts")
        return cast(RolloutHistory, self._json(call))

    def create_key(self, workspace_id: str, principal_id: str) -> CreatedKey:
        body: CreateKeyRequest = {"principalId": principal_id}
        call = Call("POST", f"/v1/workspaces/{segment(workspace_id)}/keys", body, True)
        return cast(CreatedKey, self._json(call, ok=(201,)))

    def list_keys(self, workspace_id: str) -> KeyListing:
        return cast(KeyListing, self._json(Call("GET", f"/v1/workspaces/{segment(workspace_id)}/keys")))

    def revoke_key(self, workspace_id: str, key_id: str) -> KeyRevocation:
        path = f"/v1/workspaces/{segment(workspace_id)}/keys/{segment(key_id)}"
        return cast(KeyRevocation, self._json(Call("DELETE", path)))

    # Operations (no key needed).

    def metrics(self) -> str:
        return _core.parse_text(self._send(Call("GET", "/metrics")))

    def healthz(self) -> JsonObject:
        return cast(JsonObject, self._json(Call("GET", "/healthz")))

    def readyz(self) -> JsonObject:
        """Readiness; raises `Unavailable` (503) while the service shuts down."""
        return cast(JsonObject, self._json(Call("GET", "/readyz")))

    def openapi(self) -> JsonObject:
        return cast(JsonObject, self._json(Call("GET", "/openapi.json")))


__all__ = ["Admission", "Client", "Lease"]
