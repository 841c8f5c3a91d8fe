"""The event-stream parser and the typed events, without a service (edge cases of the format)."""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator, Iterator

import httpx
import pytest

from turnstile_client import (
    ApiError,
    AsyncClient,
    Client,
    Forbidden,
    Lagged,
    NotFound,
    SseEvent,
    SseParser,
    Update,
)
from turnstile_client._events import decode

UPDATE = {
    "atEpochMs": 2000,
    "sinceEpochMs": 1750,
    "lanes": [
        {
            "providerId": "p",
            "active": 1,
            "concurrency": 4,
            "queued": 0,
            "oldestWaitMs": None,
            "requests": {"available": 9, "capacity": 10},
            "tokens": None,
            "breakerState": "closed",
            "nextProbeAt": None,
            "pausedUntil": None,
        }
    ],
    "decisions": [
        {"providerId": "p", "reason": "admitted", "count": 3},
        {"providerId": "p", "reason": "queue-full", "count": 1},
    ],
    "transitions": [],
    "pauses": [],
    "dropped": 0,
}


def parse(*chunks: bytes) -> list[SseEvent]:
    parser = SseParser()
    events: list[SseEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    parser.close()
    return events


def pairs(events: list[SseEvent]) -> list[tuple[str, str]]:
    return [(e.event, e.data) for e in events]


def test_an_event_with_a_name_and_data() -> None:
    assert pairs(parse(b"event: update\ndata: {}\n\n")) == [("update", "{}")]


def test_data_lines_are_joined_with_a_line_feed() -> None:
    assert pairs(parse(b"event: x\ndata: one\ndata:two\ndata\ndata:  three\n\n")) == [("x", "one\ntwo\n\n three")]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(eol: bytes) -> None:
    stream = eol.join([b"event: a", b"data: 1", b"", b": heartbeat", b"", b"data: 2", b"", b""])
    assert pairs(parse(stream)) == [("a", "1"), ("message", "2")]


def test_a_crlf_split_between_two_chunks_is_one_line_ending() -> None:
    # A CR ends the line at once; the LF in the next chunk must not count as a blank line.
    assert pairs(parse(b"data: a\r", b"\ndata: b\r\n", b"\r\n")) == [("message", "a\nb")]


def test_feeding_byte_by_byte_gives_the_same_events() -> None:
    stream = (
        "\ufeff: hello\r\nevent: update\r\ndata: {\"é\": \"✓\"}\r\n\r\n"
        "event: lagged\ndata: {\"missed\": 3}\n\nretry: 10\rdata: x\r\r"
    ).encode()
    whole = parse(stream)
    assert pairs(whole) == [("update", '{"é": "✓"}'), ("lagged", '{"missed": 3}'), ("message", "x")]
    assert pairs(parse(*[stream[i : i + 1] for i in range(len(stream))])) == pairs(whole)


def test_comments_are_ignored_anywhere() -> None:
    assert pairs(parse(b":keep-alive\n\n: x\nevent: a\n:comment\ndata: 1\n\n")) == [("a", "1")]


def test_an_event_without_data_is_not_dispatched_and_its_name_does_not_leak() -> None:
    assert pairs(parse(b"event: a\n\ndata: 1\n\n")) == [("message", "1")]


def test_an_empty_data_line_is_an_event_with_empty_data() -> None:
    assert pairs(parse(b"data:\n\n")) == [("message", "")]


def test_id_retry_and_unknown_fields() -> None:
    parser = SseParser()
    events = parser.feed(b"id: 7\nretry: 1500\nfoo: bar\ndata: a\n\nid: x\0y\ndata: b\n\nretry: soon\n\n")
    assert [(e.data, e.id) for e in events] == [("a", "7"), ("b", "7")]
    assert parser.retry_ms == 1500


def test_a_byte_order_mark_is_dropped_only_at_the_start() -> None:
    assert pairs(parse(b"\xef\xbb\xbfdata: a\n\n")) == [("message", "a")]
    assert pairs(parse(b"data: a\n\n\xef\xbb\xbfdata: b\n\n")) == [("message", "a")]


def test_an_unterminated_event_at_the_end_is_discarded() -> None:
    assert pairs(parse(b"data: a\n\ndata: b\n")) == [("message", "a")]
    assert pairs(parse(b"data: a\n\ndata: b")) == [("message", "a")]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert pairs(parse(b"data: \xff\n\n")) == [("message", "\ufffd")]


def test_decode_update_lagged_and_unknown_events() -> None:
    update = decode(SseEvent("update", json.dumps({**UPDATE, "futureField": 1})))
    assert isinstance(update, Update)
    assert (update.at_epoch_ms, update.since_epoch_ms, update.dropped) == (2000, 1750, 0)
    assert update.count() == 4 and update.count("p", "admitted") == 3 and update.count(reason="queue-full") == 1
    assert update.principals == [] and update.profile_change is None
    lane = update.lane("p")
    assert lane is not None and lane["requests"] == {"available": 9, "capacity": 10}
    assert update.data["futureField"] == 1  # type: ignore[typeddict-item]
    assert decode(SseEvent("lagged", '{"missed": 12}')) == Lagged(12)
    assert decode(SseEvent("message", "anything")) is None
    assert decode(SseEvent("snapshot", "{}")) is None


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("update", "not json"),
        ("update", "[1]"),
        ("lagged", '{"missed": "3"}'),
        ("lagged", "{}"),
        ("update", json.dumps({**UPDATE, "lanes": 1})),
        ("update", json.dumps({**UPDATE, "principals": {}})),
        ("update", json.dumps({k: v for k, v in UPDATE.items() if k != "atEpochMs"})),
    ],
)
def test_a_known_event_with_bad_data_is_an_invalid_response(name: str, data: str) -> None:
    with pytest.raises(ApiError) as bad:
        decode(SseEvent(name, data))
    assert bad.value.error == "invalid-response"


# The streams, through a fake transport.

FRAMES = [
    b": connected\r\n\r\n",
    b"event: update\r\ndata: " + json.dumps(UPDATE).encode()[:20],
    json.dumps(UPDATE).encode()[20:] + b"\r",
    b"\n\r\nevent: hello-from-the-future\ndata: {}\n\n",
    b"event: lagged\ndata: {\"missed\": 5}\n\n",
    b"event: update\ndata: ",
    b"{\"atEpochMs\": 3000, \"sinceEpochMs\": 2000, \"lanes\": [], \"decisions\": [], \"transitions\": [],\n",
    b"data: \"pauses\": [], \"dropped\": 0, \"principals\": [{\"principalId\": \"a\", \"grants\": 1, \"queueDelayMs\": 0}]}\n\n",
    b"event: update\ndata: {}\n",  # unterminated: discarded
]


def handler(seen: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        workspace = request.url.path.split("/")[3]
        if workspace == "missing":
            return httpx.Response(404, json={"error": "no-profile", "message": "no profile"})
        if workspace == "other":
            return httpx.Response(403, json={"error": "forbidden", "message": "not yours"})
        if workspace == "html":
            return httpx.Response(200, headers={"content-type": "text/html"}, content=b"<p>")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(FRAMES))

    return httpx.MockTransport(answer)


def test_the_sync_stream_parses_skips_unknown_events_and_maps_errors() -> None:
    seen: list[httpx.Request] = []
    with Client("http://turnstile.test", "tsk_x", http=httpx.Client(transport=handler(seen))) as client:
        with client.events("ws", max_events=7) as events:
            got = list(events)
        assert [type(e) for e in got] == [Update, Lagged, Update]
        first, lagged, last = got
        assert isinstance(first, Update) and first.count("p") == 4
        assert lagged == Lagged(5)
        assert isinstance(last, Update) and last.principals[0]["principalId"] == "a"
        assert events.closed
        request = seen[-1]
        assert request.url.params["maxEvents"] == "7"
        assert request.headers["accept"] == "text/event-stream"
        assert request.headers["authorization"] == "Bearer tsk_x"
        with pytest.raises(NotFound):
            next(client.events("missing"))
        with pytest.raises(Forbidden):
            with client.events("other"):
                pass
        with pytest.raises(ApiError) as html:
            next(client.events("html"))
        assert html.value.error == "invalid-response"


def test_the_async_stream_parses_skips_unknown_events_and_maps_errors() -> None:
    async def frames() -> AsyncIterator[bytes]:
        for frame in FRAMES:
            yield frame

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.split("/")[3] == "missing":
            return httpx.Response(404, json={"error": "no-profile", "message": "no profile"})
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=frames())

    async def main() -> None:
        http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
        async with AsyncClient("http://turnstile.test", "tsk_x", http=http) as client:
            stream = client.events("ws")
            got = [event async for event in stream]
            assert [type(e) for e in got] == [Update, Lagged, Update] and stream.closed
            with pytest.raises(NotFound):
                async with client.events("missing"):
                    pass
        await http.aclose()

    asyncio.run(main())


def test_a_stream_cut_mid_way_is_unavailable() -> None:
    def frames() -> Iterator[bytes]:
        yield b"event: lagged\ndata: {\"missed\": 1}\n\n"
        raise httpx.ReadError("connection reset")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=frames())

    with Client("http://turnstile.test", "tsk_x", http=httpx.Client(transport=httpx.MockTransport(answer))) as client:
        with client.events("ws") as events:
            assert next(events) == Lagged(1)
            with pytest.raises(ApiError) as cut:
                next(events)
            assert cut.value.status is None and cut.value.error == "unreachable"
            assert events.closed
