"""The sync client against a real `turnstile serve` (see conftest.py)."""

from __future__ import annotations

import time
import uuid

import pytest
from conftest import TTL_MS, WORKSPACE, Service, metric
from shapes import unknown_keys

from turnstile_client import (
    AuthError,
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    LeaseLost,
    NotFound,
    Refused,
    RetryAfter,
    Unavailable,
)
from turnstile_client._types import (
    Evidence,
    FairnessView,
    KeyListing,
    LeaseBody,
    PauseHistory,
    ProfileChangeRecord,
    ProfileHistory,
    ProfileRevision,
    ReleaseResult,
    Rollout,
    RolloutRecord,
    Snapshot,
    WorkspaceList,
)


def budget() -> str:
    return f"inv-{uuid.uuid4().hex[:12]}"


class ProviderRateLimited(Exception):
    """What a provider SDK might raise on a 429: it carries the provider's Retry-After."""

    retry_after_ms = 5000


def test_admit_and_release_with_actual_usage(client: Client) -> None:
    before = client.metrics()
    with client.admission(
        provider_id="steady-sync", budget_id=budget(), estimate={"tokens": 800, "cost_usd": 0.01}, wait_ms=2000
    ) as lease:
        assert len(lease.lease_id) == 32
        assert lease.ttl_ms == TTL_MS
        assert lease.evidence["decision"] == "admit" and lease.evidence["reason"] == "admitted"
        assert lease.expires_at_epoch_ms > time.time() * 1000
        assert client.snapshot(WORKSPACE)["providers"]["steady-sync"]["active"] == 1
        lease.report_usage(tokens=734, cost_usd=0.0092)
    assert lease.released and lease.release_error is None and not lease.lost
    assert lease.release_result == {"released": True, "breakerTransitions": []}
    after = client.metrics()
    assert metric(after, "turnstile_actual_tokens_total") - metric(before, "turnstile_actual_tokens_total") == 734
    assert (
        metric(after, "turnstile_actual_cost_micro_usd_total") - metric(before, "turnstile_actual_cost_micro_usd_total")
        == 9200
    )
    assert client.snapshot(WORKSPACE)["providers"]["steady-sync"]["active"] == 0


def test_live_answers_have_only_fields_the_client_knows(client: Client, admin: Client) -> None:
    lease = client.acquire("steady-sync", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=1000)
    assert unknown_keys(dict(lease.evidence), Evidence) == []
    raw: LeaseBody = {"leaseId": lease.lease_id, "ttlMs": lease.ttl_ms, "evidence": lease.evidence}
    assert unknown_keys(raw, LeaseBody) == []
    assert unknown_keys(lease.heartbeat(), LeaseBody) == []
    assert unknown_keys(lease.release(), ReleaseResult) == []
    assert unknown_keys(client.snapshot(WORKSPACE), Snapshot) == []
    assert unknown_keys(admin.list_keys(WORKSPACE), KeyListing) == []


def test_a_request_that_can_never_fit_is_refused_with_typed_fields(client: Client) -> None:
    # 5000 tokens against a 1000 tokens-per-second bucket: can never fit.
    with pytest.raises(Refused) as refused:
        with client.admission("steady-sync", budget(), {"tokens": 5000, "cost_usd": 0.01}, wait_ms=1000):
            pytest.fail("admitted")
    error = refused.value
    assert error.status == 422
    assert error.reason == "tokens-per-second"
    assert error.retryable is False
    assert error.evidence["decision"] == "reject"
    assert error.evidence["reason"] == "tokens-per-second"
    assert error.evidence["estimatedTokens"] == 5000
    assert error.retry_after_ms is None


def test_an_unconfigured_provider_is_refused(client: Client) -> None:
    with pytest.raises(Refused) as refused:
        client.acquire("no-such-provider", budget(), {})
    assert (refused.value.status, refused.value.reason, refused.value.retryable) == (422, "unconfigured-provider", False)


def test_an_exception_releases_with_outcome_failure(client: Client) -> None:
    # The lane's breaker opens after one failure: the service shows the failure outcome.
    with pytest.raises(ValueError, match="provider broke"):
        with client.admission("fragile-sync", budget(), {"tokens": 10, "cost_usd": 0.01}, wait_ms=1000) as lease:
            raise ValueError("provider broke")
    assert lease.released and lease.release_error is None
    assert lease.release_result is not None
    [transition] = lease.release_result["breakerTransitions"]
    assert (transition["providerId"], transition["from"], transition["to"]) == ("fragile-sync", "closed", "open")
    history = client.breaker_history(WORKSPACE)["records"]
    assert any(r["providerId"] == "fragile-sync" and r["to"] == "open" for r in history)
    with pytest.raises(Refused) as refused:
        client.acquire("fragile-sync", budget(), {"tokens": 10, "cost_usd": 0.01}, wait_ms=100)
    assert refused.value.reason == "circuit-open"
    assert refused.value.status == 503 and refused.value.retryable is True
    assert refused.value.retry_after_ms is not None and refused.value.retry_after_ms > 0


def test_an_exception_with_retry_after_pauses_the_provider(client: Client) -> None:
    with pytest.raises(ProviderRateLimited):
        with client.admission("pausable-sync", budget(), {"tokens": 10, "cost_usd": 0.01}, wait_ms=1000) as lease:
            lease.report_usage(tokens=3)
            raise ProviderRateLimited()
    assert lease.released and lease.release_error is None
    paused_until = client.snapshot(WORKSPACE)["providers"]["pausable-sync"]["pausedUntil"]
    assert paused_until is not None and paused_until > time.time() * 1000 + 3000
    with pytest.raises(Refused) as refused:
        client.acquire("pausable-sync", budget(), {"tokens": 10, "cost_usd": 0.01}, wait_ms=200)
    assert refused.value.reason == "retry-after"
    assert refused.value.status == 503 and refused.value.retryable is True
    assert refused.value.retry_after_ms is not None and 3000 < refused.value.retry_after_ms <= 5000


def test_a_retry_after_above_the_service_maximum_still_frees_the_slot(client: Client) -> None:
    # admission.max_retry_after_ms is 1 hour: the service refuses the release (422), the
    # client releases again as a failure so that the slot is not held until the TTL.
    with pytest.raises(RetryAfter):
        with client.admission("steady-sync", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=1000) as lease:
            raise RetryAfter(10 * 3_600_000)
    assert isinstance(lease.release_error, BadRequest) and lease.release_error.field == "retryAfterMs"
    assert lease.released
    assert client.snapshot(WORKSPACE)["providers"]["steady-sync"]["active"] == 0


def test_heartbeats_keep_a_lease_alive_past_its_ttl(client: Client, service: Service) -> None:
    expired_before = metric(client.metrics(), "turnstile_leases_expired_total")
    with client.admission("solo-sync", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=1000) as lease:
        time.sleep(2.5 * TTL_MS / 1000)
        # Still ours: the only slot of the lane is taken.
        with Client(service.base_url, service.key) as other, pytest.raises(Refused):
            other.acquire("solo-sync", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=100)
        assert not lease.lost
    assert lease.heartbeats >= 4
    assert lease.released and lease.release_error is None
    assert metric(client.metrics(), "turnstile_leases_expired_total") == expired_before


def test_without_heartbeats_the_lease_is_reclaimed_at_its_ttl(client: Client) -> None:
    expired_before = metric(client.metrics(), "turnstile_leases_expired_total")
    with client.admission("expiry-sync", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=1000, heartbeat=False) as lease:
        time.sleep(2 * TTL_MS / 1000)
    assert not lease.released and lease.lost
    assert isinstance(lease.release_error, LeaseLost) and lease.release_error.error == "unknown-lease"
    assert metric(client.metrics(), "turnstile_leases_expired_total") == expired_before + 1


def test_explicit_release_raises_and_is_idempotent(client: Client) -> None:
    lease = client.acquire("steady-sync", budget(), {"tokens": 1, "cost_usd": 0.001}, wait_ms=1000)
    first = lease.release("none")
    assert first["released"] is True
    assert lease.release("failure") is first  # no second request
    with pytest.raises(LeaseLost):
        client.release(lease.lease_id, "success")
    with pytest.raises(LeaseLost):
        client.heartbeat(lease.lease_id)


def test_budget_release_pause_and_histories(client: Client) -> None:
    spent = budget()
    with client.admission("steady-sync", spent, {"tokens": 1, "cost_usd": 0.5}, wait_ms=1000):
        pass
    assert client.release_budget(spent) == {"released": True}
    assert client.release_budget(spent) == {"released": False}
    paused = client.pause_provider("pausable-sync", 1000)
    assert paused["pausedUntilEpochMs"] > time.time() * 1000
    with pytest.raises(NotFound):
        client.pause_provider("no-such-provider", 1000)
    records = client.profile_history(WORKSPACE)["records"]
    assert [(r["kind"], r["profileVersion"]) for r in records] == [("initial", "v1")]
    assert client.healthz() == {"status": "ok"}
    assert client.readyz() == {"status": "ready"}
    assert client.openapi()["openapi"].startswith("3.")


def test_admin_keys_and_profiles(admin: Client, service: Service) -> None:
    from conftest import PROFILE

    assert admin.register_profile(WORKSPACE, "v1", PROFILE) == {"unchanged": True, "profileVersion": "v1"}
    created = admin.create_key(WORKSPACE, "py")
    assert created["key"].startswith("tsk_") and created["workspaceId"] == WORKSPACE
    assert any(k["keyId"] == created["keyId"] for k in admin.list_keys(WORKSPACE)["keys"])
    with Client(service.base_url, created["key"]) as fresh:
        assert fresh.snapshot(WORKSPACE)["active"] >= 0
        revocation = admin.revoke_key(WORKSPACE, created["keyId"])
        assert revocation["schema"] == "turnstile-key-revocation/v1" and revocation["keyId"] == created["keyId"]
        with pytest.raises(AuthError):
            fresh.snapshot(WORKSPACE)
    with pytest.raises(NotFound) as unknown:
        admin.revoke_key(WORKSPACE, created["keyId"])
    assert unknown.value.error == "unknown-key"


def test_a_revision_change_keeps_its_approval_on_record(admin: Client) -> None:
    """Issue 33, item 4: `note` and `approved_by` travel with the change and come back in the
    record and the history; a bad one is a typed 422 naming the field."""
    from conftest import PROFILE

    workspace = "py-approvals"
    record = admin.register_profile(workspace, "v1", PROFILE, note="CHG-7\nfirst limits", approved_by="Dana")
    assert unknown_keys(record, ProfileChangeRecord) == []
    assert (record.get("note"), record.get("approvedBy")) == ("CHG-7\nfirst limits", "Dana")
    with pytest.raises(BadRequest) as refused:
        admin.register_profile(workspace, "v2", PROFILE, approved_by="x" * 129)
    assert (refused.value.status, refused.value.error, refused.value.field) == (422, "invalid-request", "approvedBy")
    history = admin.profile_history(workspace)["records"]
    assert [(r["kind"], r["note"], r["approvedBy"]) for r in history] == [("initial", "CHG-7\nfirst limits", "Dana")]


def test_a_rollout_is_started_read_promoted_and_listed(admin: Client) -> None:
    """Issue 33: the rollout calls against the real service, typed answers and errors."""
    from conftest import PROFILE

    workspace = "py-rollouts"
    admin.register_profile(workspace, "v1", PROFILE)
    tighter = {**PROFILE, "workspace": {**PROFILE["workspace"], "concurrency": 8}}
    started = admin.start_rollout(workspace, "v2", tighter, "shadow", note="try 8", approved_by="Dana")
    assert unknown_keys(started, Rollout) == []
    assert (started["revision"], started["mode"], started["canaryShare"]) == ("v2", "shadow", None)
    assert admin.current_rollout(workspace)["decisions"]["compared"] == 0
    with pytest.raises(Conflict) as running:
        admin.start_rollout(workspace, "v3", tighter, "canary", canary_share=0.5)
    assert running.value.error == "rollout-running"
    with pytest.raises(BadRequest) as bad:
        admin.abort_rollout(workspace, approved_by="")
    assert bad.value.field == "approvedBy"
    promoted = admin.promote_rollout(workspace, note="clean", approved_by="CAB-1")
    assert unknown_keys(promoted, RolloutRecord) == []
    assert (promoted["event"], promoted["approvedBy"]) == ("promoted", "CAB-1")
    with pytest.raises(NotFound) as none:
        admin.current_rollout(workspace)
    assert none.value.error == "no-rollout"
    records = admin.rollout_history(workspace)["records"]
    assert [(r["event"], r["note"]) for r in records] == [("started", "try 8"), ("promoted", "clean")]
    assert admin.profile_history(workspace)["records"][-1]["profileVersion"] == "v2"


def test_console_reads_pauses_fairness_and_a_revision(client: Client, admin: Client) -> None:
    # A lease released with retry-after pauses its lane; the pause history says why.
    with pytest.raises(ProviderRateLimited):
        with client.admission("pausable-sync", budget(), {"tokens": 1, "cost_usd": 0.01}, wait_ms=6000):
            raise ProviderRateLimited()
    pauses = client.pause_history(WORKSPACE)
    assert unknown_keys(pauses, PauseHistory) == []
    last = pauses["records"][-1]
    assert (last["providerId"], last["cause"], last["retryAfterMs"]) == ("pausable-sync", "release-outcome", 5000)
    assert last["schema"] == "turnstile-provider-pause/v1"

    # Fairness: the admin sees every principal; this principal key its own row only.
    with client.admission("steady-sync", budget(), {"tokens": 1, "cost_usd": 0.01}, wait_ms=1000):
        pass
    everyone = admin.fairness(WORKSPACE)
    assert unknown_keys(everyone, FairnessView) == []
    assert everyone["totalGrants"] >= 1 and everyone["bucketMs"] == 60000
    assert abs(sum(p["share"] for p in everyone["principals"]) - 1.0) < 1e-9
    own = client.fairness(WORKSPACE)
    assert [p["principalId"] for p in own["principals"]] == ["py"]
    # Tokens served: the estimate at admission, replaced by the usage the release reports; the
    # principal's weight and band and each lane's mode come from the profile in force.
    before = own["principals"][0]["tokens"]
    with client.admission("fair-sync", budget(), {"tokens": 4000, "cost_usd": 0.01}, wait_ms=1000) as lease:
        assert client.fairness(WORKSPACE)["principals"][0]["tokens"] == before + 4000
        lease.report_usage(tokens=1234)
    own = client.fairness(WORKSPACE)
    row = own["principals"][0]
    assert row["tokens"] == before + 1234 and own["totalTokens"] == row["tokens"]
    assert (row["weight"], row["priority"], row["tokenShare"]) == (2.0, "interactive", 1.0)
    assert sum(m["tokens"] for m in own["minutes"]) == own["totalTokens"]
    modes = {p["providerId"]: p["fairness"] for p in own["providers"]}
    assert modes["fair-sync"] == "tokens" and modes["steady-sync"] == "requests"
    with pytest.raises(NotFound) as missing:
        admin.fairness("no-such-workspace")
    assert missing.value.error == "no-profile"

    # The workspaces a key may see: the admin every one with a profile, a principal its own.
    listed = admin.workspaces()
    assert unknown_keys(listed, WorkspaceList) == []
    assert {"workspaceId": WORKSPACE, "profileVersion": "v1"} in listed["workspaces"]
    assert client.workspaces() == {"workspaces": [{"workspaceId": WORKSPACE, "profileVersion": "v1"}]}

    # A revision's limits (admin), and who registered each change.
    revision = admin.profile_revision(WORKSPACE, "v1")
    assert unknown_keys(revision, ProfileRevision) == []
    assert revision["profileVersion"] == "v1" and "steady-sync" in revision["profile"]["providers"]
    history = client.profile_history(WORKSPACE)
    assert unknown_keys(history, ProfileHistory) == []
    assert str(history["records"][0]["actorKeyId"]).startswith("key_")
    with pytest.raises(Forbidden):
        client.profile_revision(WORKSPACE, "v1")
    with pytest.raises(NotFound) as unknown:
        admin.profile_revision(WORKSPACE, "v404")
    assert unknown.value.error == "unknown-revision"


def test_a_wrong_key_is_a_typed_auth_error(service: Service) -> None:
    with Client(service.base_url, "tsk_" + "0" * 64) as wrong:
        with pytest.raises(AuthError) as denied:
            with wrong.admission("steady-sync", budget(), {"tokens": 1}, wait_ms=100):
                pytest.fail("admitted")
    assert denied.value.status == 401 and denied.value.error == "unauthorized"


def test_an_admin_key_may_not_acquire(admin: Client) -> None:
    with pytest.raises(Forbidden) as denied:
        admin.acquire("steady-sync", budget(), {})
    assert denied.value.status == 403 and denied.value.error == "forbidden"


def test_a_bad_request_carries_the_servers_error_and_field(client: Client) -> None:
    with pytest.raises(BadRequest) as bad:
        client.acquire("steady-sync", budget(), {"tokens": 1}, wait_ms=10**9)
    assert (bad.value.status, bad.value.error, bad.value.field) == (422, "invalid-request", "deadlineMs")
    assert "deadlineMs" in bad.value.message


def test_an_unreachable_service_is_unavailable() -> None:
    with Client("http://127.0.0.1:9", "tsk_x", timeout=2) as nowhere:
        with pytest.raises(Unavailable) as down:
            nowhere.acquire("steady-sync", budget(), {})
    assert down.value.status is None and down.value.error == "unreachable"
