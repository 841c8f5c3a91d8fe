"""The asyncio client against a real `turnstile serve` (see conftest.py).

Each test runs its own event loop with `asyncio.run` (no pytest plugin needed)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Awaitable, Callable

import pytest
from conftest import TTL_MS, WORKSPACE, Service, metric

from turnstile_client import AsyncClient, AuthError, BadRequest, LeaseLost, Refused, RetryAfter


def budget() -> str:
    return f"inv-{uuid.uuid4().hex[:12]}"


def run(service: Service, body: Callable[[AsyncClient], Awaitable[None]], key: str | None = None) -> None:
    async def main() -> None:
        async with AsyncClient(service.base_url, key or service.key) as client:
            await body(client)

    asyncio.run(main())


def test_async_admit_and_release_with_actual_usage(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        before = metric(await client.metrics(), "turnstile_actual_tokens_total")
        async with client.admission(
            provider_id="steady-async", budget_id=budget(), estimate={"tokens": 500, "cost_usd": 0.01}, wait_ms=2000
        ) as lease:
            assert lease.evidence["reason"] == "admitted" and lease.ttl_ms == TTL_MS
            assert (await client.snapshot(WORKSPACE))["providers"]["steady-async"]["active"] == 1
            lease.report_usage(tokens=321)
        assert lease.released and lease.release_error is None
        assert lease.release_result == {"released": True, "breakerTransitions": []}
        assert metric(await client.metrics(), "turnstile_actual_tokens_total") - before == 321
        assert (await client.snapshot(WORKSPACE))["providers"]["steady-async"]["active"] == 0

    run(service, body)


def test_async_refusal_has_typed_fields(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        with pytest.raises(Refused) as refused:
            async with client.admission("steady-async", budget(), {"tokens": 5000, "cost_usd": 0.01}, wait_ms=500):
                pytest.fail("admitted")
        assert (refused.value.status, refused.value.reason, refused.value.retryable) == (422, "tokens-per-second", False)
        assert refused.value.evidence["decision"] == "reject"

    run(service, body)


def test_async_exception_releases_with_outcome_failure(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        with pytest.raises(RuntimeError):
            async with client.admission("fragile-async", budget(), {"tokens": 1, "cost_usd": 0.01}, wait_ms=1000) as lease:
                raise RuntimeError("provider broke")
        assert lease.release_result is not None
        assert [(t["from"], t["to"]) for t in lease.release_result["breakerTransitions"]] == [("closed", "open")]
        with pytest.raises(Refused) as refused:
            await client.acquire("fragile-async", budget(), {"tokens": 1, "cost_usd": 0.01}, wait_ms=100)
        assert refused.value.reason == "circuit-open"

    run(service, body)


def test_async_retry_after_pauses_the_provider(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        with pytest.raises(RetryAfter):
            async with client.admission("pausable-async", budget(), {"tokens": 1, "cost_usd": 0.01}, wait_ms=1000):
                raise RetryAfter(4000)
        paused = (await client.snapshot(WORKSPACE))["providers"]["pausable-async"]["pausedUntil"]
        assert paused is not None and paused > time.time() * 1000 + 2000
        with pytest.raises(Refused) as refused:
            await client.acquire("pausable-async", budget(), {"tokens": 1, "cost_usd": 0.01}, wait_ms=200)
        assert refused.value.reason == "retry-after" and refused.value.status == 503
        assert refused.value.retry_after_ms is not None and 2000 < refused.value.retry_after_ms <= 4000

    run(service, body)


def test_async_heartbeats_keep_a_lease_alive_past_its_ttl(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        expired_before = metric(await client.metrics(), "turnstile_leases_expired_total")
        async with client.admission("solo-async", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=1000) as lease:
            await asyncio.sleep(2.5 * TTL_MS / 1000)
            with pytest.raises(Refused):
                await client.acquire("solo-async", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=100)
        assert lease.heartbeats >= 4 and lease.released and not lease.lost
        assert metric(await client.metrics(), "turnstile_leases_expired_total") == expired_before

    run(service, body)


def test_async_without_heartbeats_the_lease_is_reclaimed(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        async with client.admission(
            "expiry-async", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=1000, heartbeat=False
        ) as lease:
            await asyncio.sleep(2 * TTL_MS / 1000)
        assert lease.lost and not lease.released and isinstance(lease.release_error, LeaseLost)

    run(service, body)


def test_a_cancelled_task_releases_with_outcome_none(service: Service) -> None:
    # cancel-async opens its breaker after one failure: a cancellation must not count as one.
    async def body(client: AsyncClient) -> None:
        leases = []
        entered = asyncio.Event()

        async def call() -> None:
            async with client.admission("cancel-async", budget(), {"tokens": 1, "cost_usd": 0.01}, wait_ms=1000) as lease:
                leases.append(lease)
                entered.set()
                await asyncio.sleep(30)

        task = asyncio.create_task(call())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert leases[0].released and leases[0].release_result == {"released": True, "breakerTransitions": []}
        async with client.admission("cancel-async", budget(), {"tokens": 1, "cost_usd": 0.01}, wait_ms=200):
            pass

    run(service, body)


def test_cancelling_a_queued_admission_leaves_the_queue(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        before = metric(await client.metrics(), "turnstile_waiters_disconnected_total")
        async with client.admission("solo-async", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=1000):
            waiting = asyncio.create_task(client.acquire("solo-async", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=20000))
            for _ in range(100):
                await asyncio.sleep(0.02)
                if (await client.snapshot(WORKSPACE))["providers"]["solo-async"]["queued"] == 1:
                    break
            else:
                pytest.fail("the second admission never queued")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            for _ in range(100):
                if (await client.snapshot(WORKSPACE))["providers"]["solo-async"]["queued"] == 0:
                    break
                await asyncio.sleep(0.02)
            assert (await client.snapshot(WORKSPACE))["providers"]["solo-async"]["queued"] == 0
        assert metric(await client.metrics(), "turnstile_waiters_disconnected_total") == before + 1

    run(service, body)


def test_async_thin_methods(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        spent = budget()
        async with client.admission("steady-async", spent, {"tokens": 1, "cost_usd": 0.01}, wait_ms=1000):
            pass
        assert await client.release_budget(spent) == {"released": True}
        assert (await client.pause_provider("pausable-async", 500))["pausedUntilEpochMs"] > 0
        assert (await client.profile_history(WORKSPACE))["records"][0]["profileVersion"] == "v1"
        assert isinstance((await client.breaker_history(WORKSPACE))["records"], list)
        pauses = (await client.pause_history(WORKSPACE))["records"]
        assert any(p["providerId"] == "pausable-async" and p["cause"] == "retry-after-call" for p in pauses)
        own = await client.fairness(WORKSPACE)
        assert own["totalGrants"] >= 1 and [p["principalId"] for p in own["principals"]] == ["py"]
        before = own["principals"][0]["tokens"]
        async with client.admission("fair-async", budget(), {"tokens": 300, "cost_usd": 0.01}, wait_ms=1000) as lease:
            lease.report_usage(tokens=30)
        own = await client.fairness(WORKSPACE)
        assert own["principals"][0]["tokens"] == before + 30 and own["principals"][0]["weight"] == 2.0
        assert {"providerId": "fair-async", "fairness": "tokens"} in own["providers"]
        assert (await client.healthz())["status"] == "ok"
        with pytest.raises(BadRequest) as bad:
            await client.acquire("steady-async", budget(), {}, wait_ms=10**9)
        assert bad.value.field == "deadlineMs"
        with pytest.raises(LeaseLost):
            await client.heartbeat("0" * 32)

    run(service, body)


def test_async_admin_reads_a_revision(service: Service) -> None:
    async def body(admin: AsyncClient) -> None:
        revision = await admin.profile_revision(WORKSPACE, "v1")
        assert revision["workspaceId"] == WORKSPACE and revision["digest"].startswith("sha256:")
        assert (await admin.fairness(WORKSPACE))["bucketMs"] == 60000
        listed = (await admin.workspaces())["workspaces"]
        assert {"workspaceId": WORKSPACE, "profileVersion": "v1"} in listed

    run(service, body, key=service.admin_key)


def test_async_wrong_key_is_a_typed_auth_error(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        with pytest.raises(AuthError) as denied:
            async with client.admission("steady-async", budget(), {}, wait_ms=100):
                pytest.fail("admitted")
        assert denied.value.status == 401 and denied.value.error == "unauthorized"

    run(service, body, key="tsk_wrong")
