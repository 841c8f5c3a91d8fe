"""The client follows `crates/server/openapi.json`: every operation, every request and response
field (recursively), every enum value, in both directions."""

from __future__ import annotations

import copy
import inspect
import json
import re
from pathlib import Path
from typing import Any

from shapes import compare

from turnstile_client import OPERATIONS, AsyncClient, Client

DOCUMENT = Path(__file__).resolve().parents[3] / "crates" / "server" / "openapi.json"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def problems_of(doc: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    documented: set[tuple[str, str]] = set()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            if (op.get("x-console") and not path.startswith("/v1/")) or op.get("x-proxy"):
                # The console's page and assets (docs/console.md), for a browser, and the proxy
                # routes (docs/proxy.md), for the providers' own SDKs: not the clients'.
                continue
            key = (method.upper(), path)
            documented.add(key)
            where = f"{key[0]} {path}"
            known = OPERATIONS.get(key)
            if known is None:
                problems.append(f"{where}: operation {op.get('operationId')} unknown to the client")
                continue
            for cls in (Client, AsyncClient):
                if not callable(getattr(cls, known.method, None)):
                    problems.append(f"{where}: {cls.__name__}.{known.method} missing")
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None and known.request is not None:
                problems.append(f"{where}: the client sends a body the document does not have")
            if body is not None:
                if known.request is None:
                    problems.append(f"{where}: request body unknown to the client")
                else:
                    compare(doc, body["schema"], known.request, f"{where} request", problems)
            for status, response in op.get("responses", {}).items():
                code = int(status)
                if code not in known.responses:
                    problems.append(f"{where}: status {code} unknown to the client")
                    continue
                hint = known.responses[code]
                for media, content in response.get("content", {}).items():
                    if media == "application/json":
                        compare(doc, content["schema"], hint, f"{where} {code}", problems)
                    elif media == "text/event-stream":
                        event_problems(doc, response, known.events, f"{where} {code}", problems)
                    elif hint is not str:
                        problems.append(f"{where} {code}: {media} answer, the client expects JSON")
            for code in set(known.responses) - {int(s) for s in op.get("responses", {})}:
                problems.append(f"{where}: the client handles status {code}, not in the document")
    for key in sorted(set(OPERATIONS) - documented):
        problems.append(f"{key[0]} {key[1]}: known to the client, not in the OpenAPI document")
    return problems


def event_problems(
    doc: dict[str, Any], response: dict[str, Any], events: dict[str, Any], where: str, problems: list[str]
) -> None:
    """A `text/event-stream` answer: the event names its description gives (`event: NAME`) are
    the client's, and the data of each is compared with the schema of the same name as the
    client's TypedDict (`FeedUpdate`), where the document has one."""
    if not events:
        problems.append(f"{where}: an event stream, the client does not read it as one")
        return
    named = set(re.findall(r"`event: ([A-Za-z0-9_-]+)`", response.get("description", "")))
    for name in sorted(named - set(events)):
        problems.append(f"{where}: event {name} in the document, unknown to the client")
    for name in sorted(set(events) - named):
        problems.append(f"{where}: event {name} known to the client, not in the document")
    schemas = doc["components"]["schemas"]
    for name, hint in sorted(events.items()):
        if hint.__name__ in schemas:
            compare(doc, {"$ref": f"#/components/schemas/{hint.__name__}"}, hint, f"{where} {name}", problems)
        elif name == "update":
            problems.append(f"{where}: no schema {hint.__name__} for the data of {name} events")


def load() -> dict[str, Any]:
    return json.loads(DOCUMENT.read_text())


def test_the_client_knows_every_operation_and_field_of_the_openapi_document() -> None:
    problems = problems_of(load())
    assert not problems, "the client and crates/server/openapi.json disagree:\n" + "\n".join(problems)


def test_every_async_method_is_a_coroutine_and_every_sync_one_is_not() -> None:
    for op in OPERATIONS.values():
        if op.events:
            # A stream: an (async) iterator and context manager, returned without awaiting.
            assert not inspect.iscoroutinefunction(getattr(AsyncClient, op.method)), op.method
            assert not inspect.iscoroutinefunction(getattr(Client, op.method)), op.method
            continue
        assert inspect.iscoroutinefunction(getattr(AsyncClient, op.method)), op.method
        assert not inspect.iscoroutinefunction(getattr(Client, op.method)), op.method


def test_the_comparison_fails_when_the_document_gains_an_operation_a_field_or_a_value() -> None:
    doc = load()
    grown = copy.deepcopy(doc)
    grown["paths"]["/v1/leases/{leaseId}/extend"] = {"post": {"operationId": "extend", "responses": {}}}
    assert any("extend" in p for p in problems_of(grown))

    grown = copy.deepcopy(doc)
    grown["components"]["schemas"]["Evidence"]["properties"]["queuePosition"] = {"type": "integer"}
    found = problems_of(grown)
    assert any("evidence.queuePosition" in p for p in found), found

    grown = copy.deepcopy(doc)
    usage = grown["components"]["schemas"]["ReleaseRequest"]["properties"]["actualUsage"]
    usage["properties"]["requestBytes"] = {"type": "integer"}
    assert any("actualUsage.requestBytes" in p for p in problems_of(grown))

    grown = copy.deepcopy(doc)
    grown["components"]["schemas"]["Estimate"]["properties"]["imageCount"] = {"type": "integer"}
    assert any("estimate.imageCount" in p for p in problems_of(grown))

    grown = copy.deepcopy(doc)
    grown["components"]["schemas"]["Rejection"]["properties"]["reason"]["enum"].append("maintenance")
    assert any("maintenance" in p for p in problems_of(grown))

    grown = copy.deepcopy(doc)
    grown["paths"]["/v1/admissions"]["post"]["responses"]["418"] = {"description": "teapot"}
    assert any("status 418" in p for p in problems_of(grown))

    shrunk = copy.deepcopy(doc)
    del shrunk["components"]["schemas"]["Lease"]["properties"]["ttlMs"]
    assert any("ttlMs" in p for p in problems_of(shrunk))

    events = "/v1/workspaces/{workspaceId}/events"
    grown = copy.deepcopy(doc)
    grown["components"]["schemas"]["FeedUpdate"]["properties"]["queueDepth"] = {"type": "integer"}
    assert any("update.queueDepth" in p for p in problems_of(grown))

    grown = copy.deepcopy(doc)
    grown["components"]["schemas"]["LaneView"]["properties"]["retryPressure"] = {"type": "integer"}
    assert any("lanes[].retryPressure" in p for p in problems_of(grown))

    grown = copy.deepcopy(doc)
    bucket = grown["components"]["schemas"]["LaneView"]["properties"]["tokens"]["oneOf"][1]
    bucket["properties"]["refillPerSecond"] = {"type": "integer"}
    assert any("tokens.refillPerSecond" in p for p in problems_of(grown))

    grown = copy.deepcopy(doc)
    grown["paths"][events]["get"]["responses"]["200"]["description"] += ", or `event: snapshot`"
    assert any("event snapshot" in p for p in problems_of(grown))

    grown = copy.deepcopy(doc)
    grown["components"]["schemas"]["LaneView"]["properties"]["breakerState"]["enum"].append("forced-open")
    assert any("forced-open" in p for p in problems_of(grown))
