"""The asyncio client: `AsyncClient`, `AsyncLease` (heartbeats on an asyncio task)."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any, Mapping, cast

import httpx

from . import _core
from ._core import Call, LeaseState, approval, segment
from ._errors import LeaseLost, TurnstileError
from ._events import AsyncEventStream, events_request
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


class AsyncLease(LeaseState):
    """A granted lease; heartbeats run on an asyncio task until it is released.

    `async with lease:` (or `AsyncClient.admission`) releases on exit with outcome `success`,
    `retry-after` or `failure` (`none` when the task is cancelled), never raising; a failed
    release is kept in `release_error`. `await lease.release()` called directly raises.
    """

    def __init__(
        self, client: AsyncClient, body: Any, provider_id: str, budget_id: str, heartbeat: bool
    ) -> None:
        super().__init__(body, provider_id, budget_id, client._heartbeat_fraction)
        self._client = client
        self._lock = asyncio.Lock()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        if heartbeat:
            self._task = asyncio.get_running_loop().create_task(self._beat(), name="turnstile-heartbeat")

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_s)
            try:
                await self.heartbeat()
            except LeaseLost:
                return
            except TurnstileError:
                continue  # transient (unreachable, 503): try again at the next interval

    async def _stop_heartbeats(self) -> None:
        self._stopping = True
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def heartbeat(self) -> HeartbeatResult:
        """Move the expiry to now + TTL (the background task does this on its own)."""
        try:
            answer = cast(HeartbeatResult, await self._client._json(self.heartbeat_call(self._client._timeout)))
        except LeaseLost:
            if not self._stopping:
                self.lost = True
            raise
        self.expires_at_epoch_ms = int(answer.get("expiresAtEpochMs", self.expires_at_epoch_ms))
        self.heartbeats += 1
        return answer

    async def release(self, outcome: Outcome = "success", retry_after_ms: int | None = None) -> ReleaseResult:
        """Release now with this outcome (and the reported usage); raises on failure.

        A second release returns the first one's result without asking the service again.
        """
        async with self._lock:
            if self.release_result is not None:
                return self.release_result
            call = self.release_call(outcome, retry_after_ms, self._client._timeout)
            await self._stop_heartbeats()
            try:
                result = cast(ReleaseResult, await self._client._json(call))
            except LeaseLost:
                self.lost = True
                raise
            self.released = True
            self.release_result = result
            return result

    async def _release_quietly(self, error: BaseException | None) -> None:
        if self.release_result is not None:
            return
        outcome, retry_after_ms = _core.outcome_for(error)
        try:
            await self.release(outcome, retry_after_ms)
        except Exception as failed:  # noqa: BLE001 - kept for the caller, never raised here
            self.release_error = failed
            retry = self.fallback_call(self.release_call(outcome, retry_after_ms, self._client._timeout), failed)
            if retry is not None:
                try:
                    self.release_result = cast(ReleaseResult, await self._client._json(retry))
                    self.released = True
                except Exception:  # noqa: BLE001
                    pass

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, asyncio.CancelledError):
            # The task is being cancelled: release anyway (shielded, so the cancellation
            # cannot cut the release short), then let the cancellation propagate.
            await asyncio.shield(self._release_quietly(exc))
        else:
            await self._release_quietly(exc)


class AsyncAdmission:
    """`async with client.admission(...) as lease:` acquires on enter, releases on exit."""

    def __init__(self, client: AsyncClient, args: dict[str, Any]) -> None:
        self._client = client
        self._args = args
        self._lease: AsyncLease | None = None

    async def __aenter__(self) -> AsyncLease:
        self._lease = await self._client.acquire(**self._args)
        return self._lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._lease is not None:
            await self._lease.__aexit__(exc_type, exc, tb)


class AsyncClient:
    """The asyncio twin of `Client` (same arguments, every request method is a coroutine).

    Cancelling a task that waits in `acquire` closes its connection, and the service removes
    the queued request at once.
    """

    def __init__(
        self,
        base_url: str,
        key: str,
        *,
        timeout: float = 10.0,
        heartbeat_fraction: float = 1 / 3,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if not 0 < heartbeat_fraction < 1:
            raise ValueError("heartbeat_fraction must be between 0 and 1")
        self._timeout = timeout
        self._heartbeat_fraction = heartbeat_fraction
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient()
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: Call) -> httpx.Response:
        try:
            return await self._http.request(
                call.method,
                self._base + call.path,
                headers=self._headers,
                json=call.body if call.has_body else None,
                timeout=call.timeout or httpx.Timeout(self._timeout),
            )
        except httpx.HTTPError as error:
            raise _core.transport_error(error) from error

    async def _json(self, call: Call, ok: tuple[int, ...] = (200,)) -> Any:
        return _core.parse_json(await self._send(call), ok)

    # Admission.

    def admission(
        self,
        provider_id: str,
        budget_id: str,
        estimate: Estimate | Mapping[str, Any] | None = None,
        wait_ms: int | None = None,
        *,
        heartbeat: bool = True,
    ) -> AsyncAdmission:
        """An async context manager: acquires on enter (raising `Refused` when refused),
        releases on exit. See `Client.admission`."""
        _core.check_wait_ms(wait_ms)
        return AsyncAdmission(
            self,
            dict(provider_id=provider_id, budget_id=budget_id, estimate=estimate, wait_ms=wait_ms, heartbeat=heartbeat),
        )

    async def acquire(
        self,
        provider_id: str,
        budget_id: str,
        estimate: Estimate | Mapping[str, Any] | None = None,
        wait_ms: int | None = None,
        *,
        heartbeat: bool = True,
    ) -> AsyncLease:
        """`POST /v1/admissions`: an `AsyncLease` (heartbeating unless `heartbeat=False`) or
        `Refused`."""
        call = _core.acquire_call(provider_id, budget_id, estimate, wait_ms, self._timeout)
        body = _core.parse_acquire(await self._send(call))
        return AsyncLease(self, body, provider_id, budget_id, heartbeat)

    async def release(
        self,
        lease_id: str,
        outcome: Outcome = "success",
        retry_after_ms: int | None = None,
        *,
        tokens: int | None = None,
        cost_usd: float | None = None,
    ) -> ReleaseResult:
        state = LeaseState({"leaseId": lease_id}, "", "", self._heartbeat_fraction)
        state.report_usage(tokens, cost_usd)
        return cast(ReleaseResult, await self._json(state.release_call(outcome, retry_after_ms, self._timeout)))

    async def heartbeat(self, lease_id: str) -> HeartbeatResult:
        return cast(HeartbeatResult, await self._json(Call("POST", f"/v1/leases/{segment(lease_id)}/heartbeat")))

    async def release_budget(self, budget_id: str) -> BudgetReleaseResult:
        call = Call("POST", f"/v1/budgets/{segment(budget_id)}/release")
        return cast(BudgetReleaseResult, await self._json(call))

    async def pause_provider(self, provider_id: str, retry_after_ms: int) -> PauseResult:
        _core.check_retry_after_ms(retry_after_ms)
        body: RetryAfterRequest = {"retryAfterMs": retry_after_ms}
        call = Call("POST", f"/v1/providers/{segment(provider_id)}/retry-after", body, True)
        return cast(PauseResult, await self._json(call))

    async def snapshot(self, workspace_id: str) -> Snapshot:
        return cast(Snapshot, await self._json(Call("GET", f"/v1/workspaces/{segment(workspace_id)}/snapshot")))

    def events(self, workspace_id: str, max_events: int | None = None) -> AsyncEventStream:
        """`GET /v1/workspaces/{workspaceId}/events`: an async iterator of `Update` and
        `Lagged` events and an async context manager that closes the connection (not a
        coroutine: `async with client.events(ws) as events: async for event in events`).
        See `Client.events`."""
        request = events_request(self._http, self._base, self._headers, workspace_id, max_events, self._timeout)
        return AsyncEventStream(self._http, request)

    async def profile_history(self, workspace_id: str) -> ProfileHistory:
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/profiles")
        return cast(ProfileHistory, await self._json(call))

    async def breaker_history(self, workspace_id: str) -> BreakerHistory:
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/breakers")
        return cast(BreakerHistory, await self._json(call))

    async def pause_history(self, workspace_id: str) -> PauseHistory:
        """Retry-After pauses of the workspace's provider lanes with their cause (last 64)."""
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/pauses")
        return cast(PauseHistory, await self._json(call))

    async def workspaces(self) -> WorkspaceList:
        """The workspaces this key may see (admin: every one with a profile; a principal key:
        its own), each with its current revision."""
        return cast(WorkspaceList, await self._json(Call("GET", "/v1/workspaces")))

    async def fairness(self, workspace_id: str) -> FairnessView:
        """Grants, share and mean queue delay per principal over the last five minutes (a
        principal key gets its own row only)."""
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/fairness")
        return cast(FairnessView, await self._json(call))

    async def profile_revision(self, workspace_id: str, profile_version: str) -> ProfileRevision:
        """A registered revision's limits (admin); sent back to `register_profile`, a rollback."""
        path = f"/v1/workspaces/{segment(workspace_id)}/profiles/{segment(profile_version)}"
        return cast(ProfileRevision, await self._json(Call("GET", path)))

    async def register_profile(
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
        return cast(ProfileChangeRecord, await self._json(Call("PUT", path, body, True), ok=(200, 201)))

    # Rollouts (issue 33): a candidate revision in shadow or on a canary slice before it binds.

    async def start_rollout(
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
        return cast(Rollout, await self._json(call, ok=(201,)))

    async def current_rollout(self, workspace_id: str) -> Rollout:
        """The running rollout and its decision comparison (404 `NotFound` `no-rollout`)."""
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/rollouts/current")
        return cast(Rollout, await self._json(call))

    async def promote_rollout(
        self, workspace_id: str, *, note: str | None = None, approved_by: str | None = None
    ) -> RolloutRecord:
        """Promote the running rollout's candidate (admin): it becomes the current revision."""
        path = f"/v1/workspaces/{segment(workspace_id)}/rollouts/current/promote"
        return cast(RolloutRecord, await self._json(Call("POST", path, approval({}, note, approved_by), True)))

    async def abort_rollout(
        self, workspace_id: str, *, note: str | None = None, approved_by: str | None = None
    ) -> RolloutRecord:
        """Abort the running rollout (admin): the current revision stays."""
        path = f"/v1/workspaces/{segment(workspace_id)}/rollouts/current/abort"
        return cast(RolloutRecord, await self._json(Call("POST", path, approval({}, note, approved_by), True)))

    async def rollout_history(self, workspace_id: str) -> RolloutHistory:
        """Rollout records (started, promoted, aborted) with their approval, oldest first."""
        call = Call("GET", f"/v1/workspaces/{segment(workspace_id)}/rollouts")
        return cast(RolloutHistory, await self._json(call))

    async def create_key(self, workspace_id: str, principal_id: str) -> CreatedKey:
        body: CreateKeyRequest = {"principalId": principal_id}
        call = Call("POST", f"/v1/workspaces/{segment(workspace_id)}/keys", body, True)
        return cast(CreatedKey, await self._json(call, ok=(201,)))

    async def list_keys(self, workspace_id: str) -> KeyListing:
        return cast(KeyListing, await self._json(Call("GET", f"/v1/workspaces/{segment(workspace_id)}/keys")))

    async def revoke_key(self, workspace_id: str, key_id: str) -> KeyRevocation:
        path = f"/v1/workspaces/{segment(workspace_id)}/keys/{segment(key_id)}"
        return cast(KeyRevocation, await self._json(Call("DELETE", path)))

    async def metrics(self) -> str:
        return _core.parse_text(await self._send(Call("GET", "/metrics")))

    async def healthz(self) -> JsonObject:
        return cast(JsonObject, await self._json(Call("GET", "/healthz")))

    async def readyz(self) -> JsonObject:
        return cast(JsonObject, await self._json(Call("GET", "/readyz")))

    async def openapi(self) -> JsonObject:
        return cast(JsonObject, await self._json(Call("GET", "/openapi.json")))
