"""The workspace's live feed (`GET …/events`) against a real `turnstile serve`, sync and async."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from conftest import PRINCIPAL, PROFILE, WORKSPACE, Service, running_service
from shapes import unknown_keys

from turnstile_client import (
    ApiError,
    AsyncClient,
    AuthError,
    BadRequest,
    Client,
    Event,
    FeedUpdate,
    Forbidden,
    NotFound,
    Update,
)

SMALL = {"tokens": 1, "cost_usd": 0.001}


def budget() -> str:
    return f"inv-{uuid.uuid4().hex[:12]}"


def updates(events: Iterator[Event]) -> Iterator[Update]:
    for event in events:
        assert isinstance(event, Update), event
        yield event


def until_admitted(events: Iterator[Event], provider: str, within_s: float = 10.0) -> Update:
    """The first update that counts an admission on `provider`."""
    deadline = time.monotonic() + within_s
    for update in updates(events):
        assert unknown_keys(dict(update.data), FeedUpdate) == []
        if update.count(provider, "admitted") >= 1:
            return update
        assert time.monotonic() < deadline, f"no admission on {provider} within {within_s} s"
    raise AssertionError("the stream ended before the admission showed")


def test_a_principal_key_gets_the_lanes_at_once(client: Client) -> None:
    with client.events(WORKSPACE, max_events=1) as events:
        first = next(events)
    assert isinstance(first, Update) and first.event == "update"
    assert {lane["providerId"] for lane in first.lanes} == set(PROFILE["providers"])
    lane = first.lane("solo-sync")
    assert lane is not None and lane["concurrency"] == 1 and lane["breakerState"] == "closed"
    assert lane["requests"] is not None and lane["requests"]["capacity"] > 0
    assert first.at_epoch_ms > 1_600_000_000_000 and first.principals == [] and first.dropped == 0
    assert first.lane("no-such-lane") is None
    assert unknown_keys(dict(first.data), FeedUpdate) == []
    assert events.closed


def test_an_admission_during_the_stream_shows_in_a_following_update(client: Client, admin: Client) -> None:
    with admin.events(WORKSPACE, max_events=60) as watched, client.events(WORKSPACE, max_events=60) as own:
        assert isinstance(next(watched), Update) and isinstance(next(own), Update)
        with client.admission("events-sync", budget(), SMALL, wait_ms=1000) as lease:
            pass
        assert lease.released
        seen_by_admin = until_admitted(watched, "events-sync")
        seen_by_principal = until_admitted(own, "events-sync")
    # Admin keys get the grants per principal; a principal key never sees `principals`.
    assert any(p["principalId"] == PRINCIPAL and p["grants"] >= 1 for p in seen_by_admin.principals)
    assert seen_by_principal.principals == []
    assert seen_by_principal.data.get("principals", []) == []
    assert watched.closed and own.closed


def test_a_principal_key_never_sees_principals(client: Client) -> None:
    with client.events(WORKSPACE, max_events=4) as events:
        next(events)
        for _ in range(3):
            with client.admission("events-sync", budget(), SMALL, wait_ms=1000):
                pass
        for update in updates(events):
            assert update.principals == [] and update.data.get("principals", []) == []


def test_max_events_ends_the_stream(client: Client) -> None:
    started = time.monotonic()
    with client.events(WORKSPACE, max_events=3) as events:
        got = list(events)
    # Nothing changes in this workspace meanwhile: the lanes at once, then one a second.
    assert len(got) == 3 and all(isinstance(e, Update) for e in got)
    assert time.monotonic() - started < 10
    assert events.closed and list(events) == []


def test_iterating_without_a_block_closes_at_the_end(client: Client) -> None:
    stream = client.events(WORKSPACE, max_events=1)
    assert not stream.closed
    assert len(list(stream)) == 1 and stream.closed


def test_leaving_streams_early_gives_their_connections_back(client: Client) -> None:
    # httpx pools at most 100 connections: 150 streams left early, each after its first
    # event, time out waiting for a connection unless each one is closed.
    for _ in range(150):
        with client.events(WORKSPACE) as events:
            assert isinstance(next(events), Update)
    for _ in range(30):
        for event in client.events(WORKSPACE, max_events=1):
            assert isinstance(event, Update)
    assert client.snapshot(WORKSPACE)["active"] >= 0


def test_the_stream_ends_cleanly_when_the_service_shuts_down(tmp_path: Path) -> None:
    with running_service(tmp_path) as own:
        with Client(own.base_url, own.key) as client, client.events(WORKSPACE) as events:
            assert isinstance(next(events), Update)
            threading.Timer(0.5, own.process.terminate).start()
            started = time.monotonic()
            rest = list(events)  # no error: the iterator just ends
        assert all(isinstance(e, Update) for e in rest) and events.closed
        assert time.monotonic() - started < 10
        assert own.process.wait(timeout=15) == 0


def test_a_workspace_without_a_profile_is_not_found(admin: Client) -> None:
    with pytest.raises(NotFound) as missing:
        with admin.events("no-such-workspace"):
            pytest.fail("opened")
    assert (missing.value.status, missing.value.error) == (404, "no-profile")
    # Iterating without a block raises the same on the first `next`.
    stream = admin.events("no-such-workspace", max_events=1)
    with pytest.raises(NotFound):
        next(stream)
    assert stream.closed


def test_other_workspaces_and_wrong_keys_are_typed_errors(client: Client, service: Service) -> None:
    with pytest.raises(Forbidden) as denied:
        with client.events("demo"):
            pytest.fail("opened")
    assert denied.value.status == 403
    with Client(service.base_url, "tsk_" + "0" * 64) as wrong:
        with pytest.raises(AuthError) as unknown:
            next(wrong.events(WORKSPACE))
    assert (unknown.value.status, unknown.value.error) == (401, "unauthorized")


def test_max_events_is_checked_before_any_request(client: Client) -> None:
    for bad in (0, -1, 100_001, 1.5, True, "3"):
        with pytest.raises(ValueError):
            client.events(WORKSPACE, max_events=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.events("", max_events=1)


def test_a_transport_failure_is_unavailable() -> None:
    with Client("http://127.0.0.1:9", "tsk_x", timeout=2) as nowhere:
        with pytest.raises(ApiError) as down:
            with nowhere.events(WORKSPACE):
                pytest.fail("opened")
    assert down.value.status is None and down.value.error == "unreachable"


def test_an_unknown_workspace_id_shape_is_a_bad_request(admin: Client) -> None:
    with pytest.raises(BadRequest) as bad:
        next(admin.events("." + "x" * 200))
    assert (bad.value.status, bad.value.error, bad.value.field) == (422, "invalid-request", "workspaceId")


# asyncio


def run_async(service: Service, key: str, body: object) -> None:
    async def main() -> None:
        async with AsyncClient(service.base_url, key) as client:
            await body(client)  # type: ignore[operator]

    asyncio.run(main())


def test_async_admin_and_principal_streams_see_an_admission(service: Service) -> None:
    async def body(admin: AsyncClient) -> None:
        async with AsyncClient(service.base_url, service.key) as client:
            async with admin.events(WORKSPACE, max_events=60) as watched, client.events(
                WORKSPACE, max_events=60
            ) as own:
                first = await watched.__anext__()
                assert isinstance(first, Update) and first.lane("events-async") is not None
                assert isinstance(await own.__anext__(), Update)
                async with client.admission("events-async", budget(), SMALL, wait_ms=1000):
                    pass
                found: dict[str, Update] = {}
                deadline = time.monotonic() + 10
                for name, stream in (("admin", watched), ("principal", own)):
                    async for event in stream:
                        assert isinstance(event, Update)
                        assert unknown_keys(dict(event.data), FeedUpdate) == []
                        if name == "principal":
                            assert event.principals == []
                        if event.count("events-async", "admitted") >= 1:
                            found[name] = event
                            break
                        assert time.monotonic() < deadline
            assert set(found) == {"admin", "principal"}
            assert any(p["principalId"] == PRINCIPAL for p in found["admin"].principals)
            assert watched.closed and own.closed

    run_async(service, service.admin_key, body)


def test_async_max_events_ends_the_stream(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        stream = client.events(WORKSPACE, max_events=2)
        got = [event async for event in stream]
        assert len(got) == 2 and all(isinstance(e, Update) for e in got)
        assert stream.closed

    run_async(service, service.key, body)


def test_async_typed_errors(service: Service) -> None:
    async def body(admin: AsyncClient) -> None:
        with pytest.raises(NotFound) as missing:
            async with admin.events("no-such-workspace"):
                pytest.fail("opened")
        assert missing.value.error == "no-profile"
        async with AsyncClient(service.base_url, service.key) as client:
            with pytest.raises(Forbidden):
                await client.events("demo").__anext__()

    run_async(service, service.admin_key, body)


def test_async_cancelling_a_reader_closes_its_stream(service: Service) -> None:
    async def body(client: AsyncClient) -> None:
        async def read() -> None:
            async with client.events(WORKSPACE) as events:
                async for _ in events:
                    pass

        task = asyncio.create_task(read())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The client still works (its connection pool was not left broken).
        async with client.events(WORKSPACE, max_events=1) as events:
            assert [type(e) async for e in events] == [Update]

    run_async(service, service.key, body)
