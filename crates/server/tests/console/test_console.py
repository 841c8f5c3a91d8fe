"""The operator's console in a real browser (headless Chromium) against a real `turnstile serve`.

Each test signs in through the page like an operator would; what the page shows is compared with
the HTTP API. Screenshots of every view at desktop and phone width go to `docs/console/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from conftest import REPO, WORKSPACE, Service

SHOTS = Path(os.environ.get("TURNSTILE_CONSOLE_SHOTS", REPO / "docs" / "console"))
VIEWS = ["lanes", "fairness", "profiles", "breakers", "keys"]
SIZES = {"desktop": (1280, 900), "phone": (390, 844)}


def key_id(key: str) -> str:
    """The public ID of a key, as the API names it: `key_` and 16 hex digits of its sha256."""
    return "key_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def wait_for(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as error:  # the element may be re-rendered under us
            last = error
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s (last: {last!r})")


def script_errors(browser: webdriver.Chrome) -> list[str]:
    """Severe console entries that are script errors (a refused request is logged as a failed
    resource load, which is the API answering, not a script error)."""
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]
    ]


def sign_in(browser: webdriver.Chrome, service: Service, key: str, workspace: str = WORKSPACE) -> None:
    fresh(browser, service)
    browser.find_element(By.ID, "key").send_keys(key)
    workspace_input = browser.find_element(By.ID, "workspace")
    workspace_input.clear()
    workspace_input.send_keys(workspace)
    browser.find_element(By.ID, "signin").click()


def fresh(browser: webdriver.Chrome, service: Service) -> None:
    """The sign-in page with nothing in the tab's storage. Storage is cleared from another page
    of the same origin, so no console script can write it back in between."""
    browser.get(service.base + "/healthz")
    browser.execute_script("sessionStorage.clear()")
    browser.get(service.base + "/ui")


def signed_in(browser: webdriver.Chrome) -> bool:
    return bool(browser.execute_script("return !document.getElementById('app').hidden"))


def status_text(browser: webdriver.Chrome) -> str:
    return str(browser.execute_script("return document.getElementById('status').textContent"))


def lane(browser: webdriver.Chrome, provider: str, field: str) -> str | None:
    return browser.execute_script(
        "const c = document.querySelector(`#lanes tr[data-provider=\"${arguments[0]}\"] td[data-field=\"${arguments[1]}\"]`);"
        "return c ? (c.dataset.value ?? c.textContent) : null;",
        provider,
        field,
    )


def tab(browser: webdriver.Chrome, view: str) -> None:
    browser.find_element(By.ID, f"tab-{view}").click()


def confirm(browser: webdriver.Chrome) -> None:
    wait_for(lambda: browser.execute_script("return document.getElementById('confirm').open"))
    browser.find_element(By.ID, "confirm-ok").click()


class Load:
    """Principals alice and bob keep lane `openai` over its limit: 9 clients, 6 permits (profile
    v2), each lease held 1.5 s, so 6 are active and about 3 queued at any instant."""

    def __init__(self, service: Service, clients: int = 9, hold: float = 1.5) -> None:
        self.service = service
        self.stop = threading.Event()
        self.admitted = 0
        self.threads = [
            threading.Thread(target=self.run, args=(service.alice if i % 2 else service.bob, hold), daemon=True)
            for i in range(clients)
        ]

    def run(self, key: str, hold: float) -> None:
        api = self.service.api
        while not self.stop.is_set():
            status, body = api.call(
                "POST", "/v1/admissions", key, {"providerId": "openai", "budgetId": f"load-{threading.get_ident()}", "estimate": {}, "deadlineMs": 10000}
            )
            if status != 200:
                time.sleep(0.05)
                continue
            self.admitted += 1
            self.stop.wait(hold)
            api.call("POST", f"/v1/leases/{body['leaseId']}/release", key, {"outcome": "success"})

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)


@pytest.fixture(scope="module")
def load(service: Service) -> Iterator[Load]:
    with Load(service) as running:
        yield running


def test_the_console_is_embedded_with_a_strict_policy(service: Service) -> None:
    import urllib.request

    with urllib.request.urlopen(service.base + "/ui", timeout=10) as response:
        policy = response.headers["Content-Security-Policy"]
        page = response.read().decode()
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "<script>" not in page and "http://" not in page and "https://" not in page
    for asset in ("app.js", "app.css", "charts.js", "rollout.js"):
        with urllib.request.urlopen(f"{service.base}/ui/{asset}", timeout=10) as response:
            assert response.status == 200
            assert "Content-Security-Policy" in response.headers


def test_the_sign_in_page_shows_no_sign_out_and_loads_every_resource(browser: webdriver.Chrome, service: Service) -> None:
    browser.get_log("browser")  # drop what earlier tests left
    fresh(browser, service)
    wait_for(lambda: browser.find_element(By.ID, "signin-view").is_displayed())
    assert not browser.find_element(By.ID, "signout").is_displayed(), "no Sign out before signing in"
    # The page names its icon, so the browser asks for no /favicon.ico (and gets no 404).
    icon = browser.execute_script("return document.querySelector('link[rel=icon]').href")
    assert icon.endswith("/ui/favicon.svg")
    import urllib.request

    with urllib.request.urlopen(icon, timeout=10) as response:
        assert response.status == 200 and response.headers["Content-Type"] == "image/svg+xml"
    time.sleep(0.5)
    failed = [e["message"] for e in browser.get_log("browser") if "Failed to load resource" in e["message"]]
    assert failed == [], failed


def test_sign_in_and_live_numbers_match_the_snapshot(browser: webdriver.Chrome, service: Service, load: Load) -> None:
    browser.set_window_size(*SIZES["desktop"])
    sign_in(browser, service, service.admin)
    wait_for(lambda: signed_in(browser))
    assert browser.execute_script("return document.body.dataset.role") == "admin"
    wait_for(lambda: lane(browser, "openai", "active") is not None)
    # The page updates at least once a second, from the feed.
    first = int(browser.execute_script("return document.body.dataset.updatedAt"))
    wait_for(lambda: int(browser.execute_script("return document.body.dataset.updatedAt")) > first, timeout=2.5)

    def agree() -> bool:
        status, snapshot = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/snapshot", service.admin)
        assert status == 200
        api = snapshot["providers"]["openai"]
        shown = (int(lane(browser, "openai", "active") or -1), int(lane(browser, "openai", "queued") or -1))
        return shown == (api["active"], api["queued"]) and api["active"] == 6 and api["queued"] > 0

    wait_for(agree, timeout=20, interval=0.2)
    # The admissions chart has drawn a line.
    wait_for(lambda: browser.execute_script("return document.querySelectorAll('#chart-admissions polyline').length") >= 1)
    assert script_errors(browser) == []


def test_a_queued_lane_shows_the_limit_that_binds_it_and_the_principals_limits(
    browser: webdriver.Chrome, service: Service, load: Load
) -> None:
    """Issue 35: under the load, `openai`'s queued lanes wait for its concurrency (6 permits,
    9 clients): the lanes view says so, as the feed's `bindings`; the admin also sees each
    principal's limits from the profile in force."""
    browser.set_window_size(*SIZES["desktop"])
    sign_in(browser, service, service.admin)
    wait_for(lambda: signed_in(browser))
    wait_for(lambda: "provider-concurrency" in (lane(browser, "openai", "binding") or "").split(), timeout=20, interval=0.2)
    shown = browser.execute_script(
        "return document.querySelector('#lanes tr[data-provider=\"openai\"] td[data-field=\"binding\"]').textContent"
    )
    assert "provider concurrency" in shown and "alice" not in shown and "bob" not in shown
    # A lane nothing waits on is held by nothing.
    assert lane(browser, "spare", "binding") == ""
    # The principals' limits are the current revision's.
    status, history = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/profiles", service.admin)
    assert status == 200
    version = history["records"][-1]["profileVersion"]
    status, revision = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/profiles/{version}", service.admin)
    assert status == 200
    wait_for(lambda: browser.find_element(By.ID, "principal-limits-card").is_displayed())
    assert browser.find_element(By.ID, "limits-revision").text == version
    for principal, limits in revision["profile"]["principals"].items():
        row = f'#principal-limits tr[data-principal="{principal}"]'
        concurrency = browser.execute_script(f"return document.querySelector('{row} td[data-field=\"concurrency\"]').textContent")
        assert concurrency == f"{limits['concurrency']:,}", (principal, concurrency)
    band = browser.execute_script("return document.querySelector('#principal-limits tr[data-principal=\"alice\"] td[data-field=\"band\"]').textContent")
    assert band == "interactive · 2"
    assert script_errors(browser) == []

    # A principal key sees why lanes wait too, but not the other principals' limits.
    sign_in(browser, service, service.alice)
    wait_for(lambda: signed_in(browser))
    wait_for(lambda: "provider-concurrency" in (lane(browser, "openai", "binding") or "").split(), timeout=20, interval=0.2)
    assert not browser.find_element(By.ID, "principal-limits-card").is_displayed()
    assert script_errors(browser) == []


def test_the_workspace_field_suggests_the_workspaces_the_key_may_see(browser: webdriver.Chrome, service: Service) -> None:
    """Issue 35: typing a key fills the workspace field's suggestions from `GET /v1/workspaces`
    (an admin: every workspace with a profile; a principal: its own); a suggestion fills it."""
    for key in (service.admin, service.alice):
        fresh(browser, service)
        browser.find_element(By.ID, "key").send_keys(key)
        browser.find_element(By.ID, "workspace").click()  # the key field's change event
        status, listed = service.api.call("GET", "/v1/workspaces", key)
        assert status == 200
        expected = sorted(w["workspaceId"] for w in listed["workspaces"])
        options = wait_for(
            lambda: browser.execute_script("return [...document.querySelectorAll('#workspace-options option')].map(o => o.value)")
        )
        assert sorted(options) == expected and WORKSPACE in expected
        assert browser.find_element(By.ID, "workspace").get_attribute("list") == "workspace-options"
        browser.find_element(By.CSS_SELECTOR, f'#workspace-suggestions button[data-workspace="{WORKSPACE}"]').click()
        assert browser.find_element(By.ID, "workspace").get_attribute("value") == WORKSPACE
        browser.find_element(By.ID, "signin").click()
        wait_for(lambda: signed_in(browser))
    # The principal's suggestions were its own workspace only.
    assert [w["workspaceId"] for w in service.api.call("GET", "/v1/workspaces", service.alice)[1]["workspaces"]] == [WORKSPACE]
    # A refused key suggests nothing.
    fresh(browser, service)
    browser.find_element(By.ID, "key").send_keys("tsk_not-a-key")
    browser.find_element(By.ID, "workspace").click()
    time.sleep(0.5)
    assert browser.execute_script("return document.querySelectorAll('#workspace-options option').length") == 0
    assert not browser.find_element(By.ID, "workspace-suggestions").is_displayed()


def test_a_breaker_opened_by_failures_shows_open_within_two_seconds(browser: webdriver.Chrome, service: Service) -> None:
    sign_in(browser, service, service.admin)
    wait_for(lambda: lane(browser, "fragile", "breaker") == "closed")
    leases = []
    for n in range(2):
        status, body = service.api.call(
            "POST", "/v1/admissions", service.alice, {"providerId": "fragile", "budgetId": f"fragile-{n}", "estimate": {}, "deadlineMs": 0}
        )
        assert status == 200, body
        leases.append(body["leaseId"])
    for lease_id in leases:
        assert service.api.call("POST", f"/v1/leases/{lease_id}/release", service.alice, {"outcome": "failure"})[0] == 200
    opened = time.monotonic()
    wait_for(lambda: lane(browser, "fragile", "breaker") == "open", timeout=2.0, interval=0.02)
    assert time.monotonic() - opened <= 2.0
    assert "probe in" in browser.execute_script(
        "return document.querySelector('#lanes tr[data-provider=\"fragile\"] td[data-field=\"breaker\"]').textContent"
    )
    # The transition is in the history view, with its reason.
    tab(browser, "breakers")
    reason = wait_for(
        lambda: browser.execute_script(
            "const r = document.querySelector('#transitions tr[data-provider=\"fragile\"][data-to=\"open\"] td[data-field=\"reason\"]');"
            "return r && r.textContent"
        )
    )
    assert "2 consecutive failures" in reason


def test_a_pause_shows_its_remaining_time(browser: webdriver.Chrome, service: Service) -> None:
    sign_in(browser, service, service.admin)
    wait_for(lambda: lane(browser, "anthropic", "pause") == "–")
    status, _ = service.api.call("POST", "/v1/providers/anthropic/retry-after", service.bob, {"retryAfterMs": 90000})
    assert status == 200
    wait_for(lambda: (lane(browser, "anthropic", "pause") or "").endswith("left"), timeout=2.0)
    tab(browser, "breakers")
    wait_for(lambda: browser.execute_script("return document.querySelector('#transitions tr[data-kind=\"pause\"]') !== null"))
    # The pause is journaled with its cause, and the history shows the cause.
    _, pauses = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/pauses", service.admin)
    last = pauses["records"][-1]
    assert (last["providerId"], last["cause"], last["retryAfterMs"]) == ("anthropic", "retry-after-call", 90000)
    reasons = browser.execute_script(
        "return [...document.querySelectorAll('#transitions tr[data-kind=\"pause\"] td[data-field=\"reason\"]')].map(td => td.textContent)"
    )
    assert any("relayed the provider's Retry-After" in r for r in reasons), reasons


def test_pauses_from_before_the_tab_opened_come_from_the_journal(browser: webdriver.Chrome, service: Service) -> None:
    # A lease released with outcome retry-after pauses its lane before any tab is open.
    status, lease = service.api.call(
        "POST", "/v1/admissions", service.alice, {"providerId": "spare", "budgetId": "pause-hist", "estimate": {}, "deadlineMs": 0}
    )
    assert status == 200, lease
    status, _ = service.api.call(
        "POST", f"/v1/leases/{lease['leaseId']}/release", service.alice, {"outcome": "retry-after", "retryAfterMs": 1500}
    )
    assert status == 200
    time.sleep(2)  # the pause is over before the tab opens: only the journal knows it
    sign_in(browser, service, service.alice)
    wait_for(lambda: signed_in(browser))
    tab(browser, "breakers")
    wait_for(
        lambda: any(
            "a call ended with Retry-After" in r
            for r in browser.execute_script(
                "return [...document.querySelectorAll('#transitions tr[data-kind=\"pause\"][data-provider=\"spare\"] td[data-field=\"reason\"]')].map(td => td.textContent)"
            )
        )
    )
    assert script_errors(browser) == []


def test_diff_and_rollback_from_the_console_are_audited(browser: webdriver.Chrome, service: Service) -> None:
    sign_in(browser, service, service.admin)
    wait_for(lambda: signed_in(browser))
    tab(browser, "profiles")
    wait_for(lambda: browser.find_element(By.ID, "current-revision").text == "v2")
    browser.execute_script("document.getElementById('diff-a').value = 'v1'; document.getElementById('diff-b').value = 'v2';")
    browser.find_element(By.CSS_SELECTOR, "#diff-form button[type=submit]").click()
    diff = wait_for(lambda: "→" in browser.find_element(By.ID, "diff").text and browser.find_element(By.ID, "diff").text)
    assert "providers.openai.concurrency: 4 → 6" in diff
    assert "providers.anthropic.requestsPerMinute: 1200 → 2400" in diff

    # Cancel first: nothing changes.
    wait_for(lambda: browser.find_element(By.CSS_SELECTOR, 'button[data-rollback="v1"]')).click()
    wait_for(lambda: browser.execute_script("return document.getElementById('confirm').open"))
    browser.find_element(By.ID, "confirm-cancel").click()
    _, history = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/profiles", service.admin)
    assert history["records"][-1]["profileVersion"] == "v2"

    browser.find_element(By.CSS_SELECTOR, 'button[data-rollback="v1"]').click()
    # The approval on record (issue 33, item 4): who approved and why, asked in the dialog.
    wait_for(lambda: browser.find_element(By.ID, "confirm-approved-by").is_displayed())
    browser.find_element(By.ID, "confirm-approved-by").send_keys("Dana (SRE on call)")
    browser.find_element(By.ID, "confirm-note").send_keys("INC-42: v2 queues too much")
    confirm(browser)
    wait_for(lambda: browser.find_element(By.ID, "current-revision").text == "v1")
    _, history = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/profiles", service.admin)
    last = history["records"][-1]
    assert (last["kind"], last["profileVersion"], last["previousProfileVersion"]) == ("rollback", "v1", "v2")
    # Who did it: the admin key's ID, in the audit log and in the console's history.
    assert last["actorKeyId"] == key_id(service.admin)
    assert (last["approvedBy"], last["note"]) == ("Dana (SRE on call)", "INC-42: v2 queues too much")
    shown = wait_for(
        lambda: browser.execute_script(
            "const r = document.querySelector('#history tbody tr'); if (!r || r.dataset.revision !== 'v1') return null;"
            "const f = (n) => r.querySelector(`td[data-field=\"${n}\"]`).textContent;"
            "return [f('actor'), f('approved-by'), f('note')]"
        )
    )
    assert shown == [key_id(service.admin), "Dana (SRE on call)", "INC-42: v2 queues too much"]
    # And forward again, through the API, so later tests see the profile they expect.
    from conftest import PROFILE_V2

    assert service.api.call("PUT", f"/v1/workspaces/{WORKSPACE}/profiles/v2", service.admin, PROFILE_V2)[0] == 201


def test_a_rollout_starts_from_a_diff_is_watched_live_and_aborted_with_its_approval(
    browser: webdriver.Chrome, service: Service
) -> None:
    """Issue 33, item 5: the rollout panel. The candidate starts as the current profile, is
    edited and diffed against it, started in shadow with an approval; its comparison follows
    real arrivals live; it is aborted with a note; the past rollouts list both records."""
    sign_in(browser, service, service.admin)
    wait_for(lambda: signed_in(browser))
    tab(browser, "profiles")
    wait_for(lambda: browser.execute_script("return document.getElementById('rollout').dataset.state") == "none")
    current = wait_for(lambda: browser.find_element(By.ID, "rollout-profile").get_attribute("value"))
    candidate = json.loads(current)
    assert candidate["providers"]["trial"]["concurrency"] == 8, "pre-filled with the current revision"
    candidate["providers"]["trial"]["concurrency"] = 1
    browser.execute_script("document.getElementById('rollout-profile').value = arguments[0];", json.dumps(candidate, indent=2))
    browser.find_element(By.ID, "rollout-candidate").send_keys("v3-tight")
    browser.find_element(By.ID, "rollout-preview").click()
    diff = wait_for(lambda: "→" in browser.find_element(By.ID, "rollout-diff").text and browser.find_element(By.ID, "rollout-diff").text)
    assert "providers.trial.concurrency: 8 → 1" in diff
    browser.find_element(By.ID, "rollout-start").click()
    wait_for(lambda: browser.find_element(By.ID, "confirm-approved-by").is_displayed())
    browser.find_element(By.ID, "confirm-approved-by").send_keys("Dana")
    browser.find_element(By.ID, "confirm-note").send_keys("CHG-9: trial down to 1")
    confirm(browser)
    wait_for(lambda: browser.execute_script("return document.getElementById('rollout').dataset.state") == "running")
    assert browser.find_element(By.ID, "rollout-revision").text == "v3-tight"

    # Three held admissions on `trial`: the current revision admits them all, the candidate
    # (concurrency 1) would have queued two; the panel shows it without a reload.
    held = []
    for _ in range(3):
        status, body = service.api.call(
            "POST", "/v1/admissions", service.alice, {"providerId": "trial", "budgetId": "rollout", "estimate": {}, "deadlineMs": 1000}
        )
        assert status == 200, body
        held.append(body["leaseId"])
    for lease in held:
        service.api.call("POST", f"/v1/leases/{lease}/release", service.alice, {"outcome": "success"})
    differ = wait_for(lambda: int(browser.find_element(By.CSS_SELECTOR, '#rollout-decisions td[data-field="differ"]').text or 0) >= 2 and browser.find_element(By.CSS_SELECTOR, '#rollout-decisions td[data-field="differ"]').text)
    _, live = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/rollouts/current", service.admin)
    assert live["decisions"]["byReason"].get("concurrency", 0) >= 2, live
    assert int(differ) <= live["decisions"]["differ"]
    assert "concurrency" in browser.find_element(By.ID, "rollout-reasons").text
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(*SIZES["desktop"])
    browser.execute_script("document.getElementById('rollout').scrollIntoView()")
    browser.save_screenshot(str(SHOTS / "rollout-desktop.png"))

    browser.find_element(By.ID, "rollout-abort").click()
    wait_for(lambda: browser.find_element(By.ID, "confirm-note").is_displayed())
    browser.find_element(By.ID, "confirm-note").send_keys("seen enough")
    confirm(browser)
    wait_for(lambda: browser.execute_script("return document.getElementById('rollout').dataset.state") == "none")
    _, records = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/rollouts", service.admin)
    events = [(r["event"], r["revision"], r["approvedBy"], r["note"]) for r in records["records"]]
    assert events[-2:] == [("started", "v3-tight", "Dana", "CHG-9: trial down to 1"), ("aborted", "v3-tight", None, "seen enough")]
    shown = wait_for(
        lambda: browser.execute_script(
            "return [...document.querySelectorAll('#rollout-history tbody tr')].slice(0, 2).map(r => r.dataset.event + ' ' + r.querySelector('td[data-field=\"note\"]').textContent)"
        )
    )
    assert shown == ["aborted seen enough", "started CHG-9: trial down to 1"]
    # The current revision never changed.
    wait_for(lambda: browser.find_element(By.ID, "current-revision").text == "v2")
    assert script_errors(browser) == []


def test_keys_are_created_once_and_a_revoked_key_is_refused(browser: webdriver.Chrome, service: Service) -> None:
    sign_in(browser, service, service.admin)
    wait_for(lambda: signed_in(browser))
    tab(browser, "keys")
    browser.find_element(By.ID, "principal").send_keys("carol")
    browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    key = wait_for(lambda: browser.find_element(By.ID, "new-key-value").text.startswith("tsk_") and browser.find_element(By.ID, "new-key-value").text)
    assert service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/snapshot", key)[0] == 200
    _, listing = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/keys", service.admin)
    key_id = next(k["keyId"] for k in listing["keys"] if k["principalId"] == "carol")
    # The listing never shows the key itself.
    assert key not in browser.find_element(By.ID, "keys").text

    wait_for(lambda: browser.find_element(By.CSS_SELECTOR, f'button[data-revoke="{key_id}"]')).click()
    confirm(browser)
    wait_for(lambda: not browser.find_elements(By.CSS_SELECTOR, f'button[data-revoke="{key_id}"]'))
    status, body = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/snapshot", key)
    assert (status, body["error"]) == (401, "unauthorized")
    # Signing in with it is refused too.
    sign_in(browser, service, key)
    wait_for(lambda: "refused" in status_text(browser))
    assert not signed_in(browser)


def test_a_principal_key_sees_only_its_own_workspace(browser: webdriver.Chrome, service: Service) -> None:
    sign_in(browser, service, service.alice, workspace="demo")
    wait_for(lambda: "may not read" in status_text(browser))
    assert not signed_in(browser)
    assert service.api.call("GET", "/v1/workspaces/demo/events?maxEvents=1", service.alice)[0] == 403

    sign_in(browser, service, service.alice)
    wait_for(lambda: signed_in(browser))
    assert browser.execute_script("return document.body.dataset.role") == "principal"
    assert not browser.find_element(By.ID, "tab-keys").is_displayed()
    assert not browser.find_element(By.ID, "tab-fairness").is_displayed()
    wait_for(lambda: lane(browser, "openai", "active") is not None)
    assert script_errors(browser) == []


def test_fairness_shows_each_principals_share(browser: webdriver.Chrome, service: Service, load: Load) -> None:
    sign_in(browser, service, service.admin)
    wait_for(lambda: signed_in(browser))
    tab(browser, "fairness")
    for principal in ("alice", "bob"):
        wait_for(
            lambda: browser.execute_script(f"return document.querySelector('#fairness tr[data-principal=\"{principal}\"]') !== null"),
            timeout=15,
        )
    shares = browser.execute_script(
        "return [...document.querySelectorAll('#fairness td[data-field=\"share\"]')].map(td => parseFloat(td.textContent))"
    )
    assert abs(sum(shares) - 100) < 0.5


def test_fairness_is_the_servers_window_not_the_tabs(browser: webdriver.Chrome, service: Service) -> None:
    # Grants made before the tab opens: a tab that aggregated the feed itself could not know them.
    for principal_key in (service.alice, service.alice, service.bob):
        status, lease = service.api.call(
            "POST", "/v1/admissions", principal_key, {"providerId": "spare", "budgetId": "fair", "estimate": {}, "deadlineMs": 0}
        )
        assert status == 200, lease
        assert service.api.call("POST", f"/v1/leases/{lease['leaseId']}/release", principal_key, {"outcome": "success"})[0] == 200
    sign_in(browser, service, service.admin)
    wait_for(lambda: signed_in(browser))
    tab(browser, "fairness")
    read_page = (
        "return Object.fromEntries([...document.querySelectorAll('#fairness tr[data-principal]')]"
        ".map(r => [r.dataset.principal, Number(r.querySelector('td[data-field=\"grants\"]').textContent)]))"
    )
    first = wait_for(lambda: browser.execute_script(read_page))
    assert set(first) == {"alice", "bob"}, first

    def agrees_with_the_server() -> bool:
        # Counts only grow within the window (a minute leaving it drops some): the page, read
        # first, never shows more than the server answers right after.
        shown = browser.execute_script(read_page)
        _, view = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/fairness", service.admin)
        expected = {p["principalId"]: p["grants"] for p in view["principals"]}
        return bool(shown) and all(0 < grants <= expected.get(p, 0) for p, grants in shown.items())

    wait_for(agrees_with_the_server)
    summary = browser.find_element(By.ID, "fairness-summary").text
    assert "grants and" in summary and "tokens since" in summary and "mean queue delay" in summary, summary
    # A principal key gets its own row only from the API; the console keeps the view for admins.
    _, own = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/fairness", service.bob)
    assert [p["principalId"] for p in own["principals"]] == ["bob"]
    assert script_errors(browser) == []


def test_fairness_shows_tokens_served_weights_and_bands(browser: webdriver.Chrome, service: Service) -> None:
    # alice: estimated 4,000, used 3,000 (the usage replaces the estimate); bob: 400, no usage.
    for principal_key, estimate, used in ((service.alice, 4000, 3000), (service.bob, 400, None)):
        status, lease = service.api.call(
            "POST", "/v1/admissions", principal_key,
            {"providerId": "spare", "budgetId": "tokens", "estimate": {"tokens": estimate}, "deadlineMs": 0},
        )
        assert status == 200, lease
        release: dict[str, Any] = {"outcome": "success"}
        if used is not None:
            release["actualUsage"] = {"tokens": used}
        assert service.api.call("POST", f"/v1/leases/{lease['leaseId']}/release", principal_key, release)[0] == 200
    sign_in(browser, service, service.admin)
    wait_for(lambda: signed_in(browser))
    tab(browser, "fairness")
    read_page = (
        "return Object.fromEntries([...document.querySelectorAll('#fairness tr[data-principal]')].map(r => [r.dataset.principal, {"
        "tokens: Number(r.querySelector('td[data-field=\"tokens\"]').dataset.value),"
        "tokenShare: parseFloat(r.querySelector('td[data-field=\"token-share\"]').textContent),"
        "weight: r.querySelector('td[data-field=\"weight\"]').textContent,"
        "priority: r.querySelector('td[data-field=\"priority\"]').textContent}]))"
    )

    def shown_as_the_server_counts() -> dict[str, Any] | None:
        shown = browser.execute_script(read_page)
        _, view = service.api.call("GET", f"/v1/workspaces/{WORKSPACE}/fairness", service.admin)
        expected = {p["principalId"]: p["tokens"] for p in view["principals"]}
        ok = {"alice", "bob"} <= set(shown) and all(row["tokens"] == expected.get(p) for p, row in shown.items())
        return shown if ok else None

    shown = wait_for(shown_as_the_server_counts)
    assert shown["alice"]["tokens"] >= 3000 and shown["bob"]["tokens"] >= 400, shown
    assert (shown["alice"]["weight"], shown["alice"]["priority"]) == ("2", "interactive"), shown
    assert (shown["bob"]["weight"], shown["bob"]["priority"]) == ("1", "standard"), shown
    assert abs(sum(row["tokenShare"] for row in shown.values()) - 100) < 0.5, shown
    assert "Lanes fair in tokens: spare;" in browser.find_element(By.ID, "fairness-modes").text
    assert "tokens since" in browser.find_element(By.ID, "fairness-summary").text
    # The tokens chart has one bar per principal.
    assert browser.execute_script("return document.querySelectorAll('#chart-fairness-tokens rect').length") == len(shown)
    assert script_errors(browser) == []


def test_screenshots_of_every_view(browser: webdriver.Chrome, service: Service, load: Load) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for size, (width, height) in SIZES.items():
        browser.set_window_size(width, height)
        fresh(browser, service)
        # The sign-in page with a typed key: its workspaces are suggested.
        browser.find_element(By.ID, "key").send_keys(service.admin)
        browser.find_element(By.ID, "workspace").click()
        wait_for(lambda: browser.find_element(By.ID, "workspace-suggestions").is_displayed())
        browser.save_screenshot(str(SHOTS / f"signin-{size}.png"))
        sign_in(browser, service, service.admin)
        wait_for(lambda: signed_in(browser))
        time.sleep(6)  # let the charts gather a few seconds of the running load
        for view in VIEWS:
            tab(browser, view)
            time.sleep(0.8)
            if view == "profiles":
                browser.execute_script("document.getElementById('diff-a').value = 'v1'; document.getElementById('diff-b').value = 'v2';")
                browser.find_element(By.CSS_SELECTOR, "#diff-form button[type=submit]").click()
                wait_for(lambda: "→" in browser.find_element(By.ID, "diff").text)
            browser.save_screenshot(str(SHOTS / f"{view}-{size}.png"))
    assert script_errors(browser) == []


def test_the_qualification_report_renders_its_charts(browser: webdriver.Chrome) -> None:
    report = Path(os.environ.get("TURNSTILE_REPORT", REPO / "docs" / "evidence" / "qualification-v2-report.html"))
    assert report.is_file(), f"{report} missing: run `turnstile qualify --report`"
    browser.set_window_size(*SIZES["desktop"])
    browser.get(report.resolve().as_uri())
    charts = browser.execute_script("return document.querySelectorAll('figure.chart svg').length")
    assert charts >= 4
    drawn = browser.execute_script("return document.querySelectorAll('figure.chart svg polyline, figure.chart svg rect').length")
    assert drawn > 0
    # One bar per principal of the manifest, ratios within [0, 1].
    ratios = browser.execute_script("return [...document.querySelectorAll('figure.chart rect[data-ratio]')].map(r => Number(r.dataset.ratio))")
    assert len(ratios) >= 2
    assert all(0.0 <= r <= 1.0 for r in ratios)
    assert ratios == sorted(ratios)
    assert browser.execute_script("return document.querySelectorAll('table.bounds tr[data-pass]').length") > 0
    assert script_errors(browser) == []
