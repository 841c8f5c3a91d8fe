"""The live event feed of a workspace (`GET /v1/workspaces/{workspaceId}/events`).

The service answers with server-sent events (`text/event-stream`). `SseParser` reads that
format as the HTML standard defines it (the parser of `EventSource`): lines end with LF, CRLF
or CR; `data:` lines of one event are joined with LF; `event:` names the event (default
`message`); `id:` and `retry:` are read and kept; lines starting with `:` are comments
(heartbeats); an event is dispatched at a blank line, and one without `data` is not; a leading
byte-order mark is dropped; an unterminated line or event at the end of the stream is
discarded.

`decode` turns an `update` event into an `Update` and a `lagged` event into a `Lagged`. Events
of any other name are skipped, as `EventSource` skips events nobody listens to: a service that
gains a new kind of event does not break code written for today's two. A known event whose
data is not the expected JSON object raises `ApiError` (`invalid-response`).

`EventStream` (sync) and `AsyncEventStream` send the request when first entered or iterated,
raise the client's typed errors for an error answer (401 `AuthError`, 403 `Forbidden`, 404
`NotFound` `no-profile`, 422 `BadRequest`, 429 / 503 ...), and close the connection when the
stream ends, when iteration raises, or when the `with` block exits.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, AsyncIterator, Iterator, Literal, Union, cast

import httpx

from . import _core
from ._errors import ApiError, error_from_response
from ._types import (
    BreakerTransition,
    DecisionCount,
    FeedPause,
    FeedProfileChange,
    FeedUpdate,
    LaneView,
    PrincipalTally,
)

MAX_EVENTS = 100_000
"""The largest `max_events` the service accepts."""


@dataclass(frozen=True)
class SseEvent:
    """One dispatched server-sent event, before its data is interpreted."""

    event: str
    data: str
    id: str = ""
    """The last event ID seen so far in the stream (the service sends none today)."""


class SseParser:
    """An incremental `text/event-stream` parser: `feed(bytes)` returns the events completed
    by those bytes; `close()` ends the stream (discarding an unterminated event)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line: list[str] = []
        self._after_cr = False
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id = ""
        self.retry_ms: int | None = None
        """The reconnection time the stream last asked for (`retry:`), if any."""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        return self._text(self._decoder.decode(chunk))

    def feed_text(self, text: str) -> list[SseEvent]:
        return self._text(text)

    def close(self) -> None:
        """End of stream: whatever was not ended by a blank line (an unterminated line, an
        event without its blank line) is discarded, as `EventSource` does."""
        self._decoder.reset()
        self._line.clear()
        self._after_cr = False
        self._event = ""
        self._data.clear()

    def _text(self, text: str) -> list[SseEvent]:
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        events: list[SseEvent] = []
        start = 0
        for i, char in enumerate(text):
            if char == "\n" and self._after_cr:
                # The LF of a CRLF whose CR ended the line already.
                self._after_cr = False
                start = i + 1
                continue
            self._after_cr = False
            if char == "\r" or char == "\n":
                self._line.append(text[start:i])
                line = "".join(self._line)
                self._line.clear()
                self._after_cr = char == "\r"
                start = i + 1
                event = self._process(line)
                if event is not None:
                    events.append(event)
        if start < len(text):
            self._line.append(text[start:])
        return events

    def _process(self, line: str) -> SseEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment (a heartbeat, say)
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        # Any other field is ignored.
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SseEvent(self._event or "message", "\n".join(self._data), self._id)
        self._event = ""
        self._data = []
        return event


@dataclass(frozen=True)
class Update:
    """An `update` event: the workspace's lanes now, and what happened since the last update.

    The attributes are the event's fields in snake_case; nested objects are the service's JSON
    (`TypedDict`s with camelCase keys), and `data` is the whole event as sent, including any
    field this version of the client does not know yet. Every update carries the full lane
    state, so a subscriber that lagged or reconnected is up to date again with the next one.
    """

    at_epoch_ms: int
    """The service's clock when the update was made."""
    since_epoch_ms: int
    """The counts cover `(since_epoch_ms, at_epoch_ms]`."""
    lanes: list[LaneView]
    decisions: list[DecisionCount]
    """Final admission answers by provider lane and reason (`admitted` or a refusal)."""
    transitions: list[BreakerTransition]
    pauses: list[FeedPause]
    principals: list[PrincipalTally]
    """Grants and summed queue delay per principal: admin keys only (empty for a principal key)."""
    profile_change: FeedProfileChange | None
    dropped: int
    """Transitions and pauses left out of this update (more than 64 in one flush)."""
    data: FeedUpdate = field(repr=False)
    event: Literal["update"] = "update"

    def lane(self, provider_id: str) -> LaneView | None:
        """The lane of this provider, or None if the profile has no such lane."""
        return next((lane for lane in self.lanes if lane.get("providerId") == provider_id), None)

    def count(self, provider_id: str | None = None, reason: str | None = None) -> int:
        """Decisions in this update, of one provider lane and / or one reason (None: all)."""
        return sum(
            int(d.get("count", 0))
            for d in self.decisions
            if (provider_id is None or d.get("providerId") == provider_id)
            and (reason is None or d.get("reason") == reason)
        )


@dataclass(frozen=True)
class Lagged:
    """A `lagged` event: this subscriber fell behind and `missed` updates were dropped for it.
    The stream goes on; the next `Update` carries the full lane state again."""

    missed: int
    event: Literal["lagged"] = "lagged"


Event = Union[Update, Lagged]
"""What an event stream yields."""


def _invalid(message: str) -> ApiError:
    return ApiError(200, "invalid-response", message)


def _list(body: dict[str, Any], key: str, optional: bool = False) -> list[Any]:
    value = body.get(key)
    if value is None and optional:
        return []
    if not isinstance(value, list):
        raise _invalid(f"the update's {key} is not an array")
    return value


def _int(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"the event's {key} is not an integer")
    return value


def decode(sse: SseEvent) -> Event | None:
    """The typed event, or None for an event of another name (skipped)."""
    if sse.event not in ("update", "lagged"):
        return None
    try:
        body = json.loads(sse.data)
    except json.JSONDecodeError:
        raise _invalid(f"the data of a {sse.event} event is not JSON") from None
    if not isinstance(body, dict):
        raise _invalid(f"the data of a {sse.event} event is not a JSON object")
    if sse.event == "lagged":
        return Lagged(_int(body, "missed"))
    change = body.get("profileChange")
    return Update(
        at_epoch_ms=_int(body, "atEpochMs"),
        since_epoch_ms=_int(body, "sinceEpochMs"),
        lanes=_list(body, "lanes"),
        decisions=_list(body, "decisions"),
        transitions=_list(body, "transitions"),
        pauses=_list(body, "pauses"),
        principals=_list(body, "principals", optional=True),
        profile_change=cast(FeedProfileChange, change) if isinstance(change, dict) else None,
        dropped=_int(body, "dropped"),
        data=cast(FeedUpdate, body),
    )


def check_max_events(max_events: int | None) -> None:
    if max_events is None:
        return
    if isinstance(max_events, bool) or not isinstance(max_events, int) or not 1 <= max_events <= MAX_EVENTS:
        raise ValueError(f"max_events must be an int in 1..={MAX_EVENTS} or None")


def events_request(
    http: httpx.Client | httpx.AsyncClient,
    base: str,
    headers: dict[str, str],
    workspace_id: str,
    max_events: int | None,
    timeout: float,
) -> httpx.Request:
    check_max_events(max_events)
    path = f"/v1/workspaces/{_core.segment(workspace_id)}/events"
    params = {"maxEvents": str(max_events)} if max_events is not None else None
    # The read timeout bounds the silence between two chunks; the service sends an update at
    # least every second, so only a dead connection reaches it.
    return http.build_request(
        "GET",
        base + path,
        params=params,
        headers={**headers, "Accept": "text/event-stream"},
        timeout=httpx.Timeout(timeout),
    )


def _check_answer(response: httpx.Response) -> None:
    """After the body of an error answer was read: raise its typed error."""
    if response.status_code != 200:
        body = None
        try:
            parsed = response.json()
            body = parsed if isinstance(parsed, dict) else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
        raise error_from_response(response.status_code, body, response.text, response.headers)
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "text/event-stream":
        raise _invalid(f"expected text/event-stream, the answer is {media or 'untyped'}")


class EventStream:
    """The events of a workspace, as an iterator of `Update` and `Lagged` (see `Client.events`).

    Use it as a context manager: leaving the block closes the connection (and the service
    drops the subscription). Iterating to the end closes it too.
    """

    def __init__(self, http: httpx.Client, request: httpx.Request) -> None:
        self._http = http
        self._request: httpx.Request | None = request
        self._response: httpx.Response | None = None
        self._chunks: Iterator[bytes] | None = None
        self._parser = SseParser()
        self._pending: list[SseEvent] = []
        self._closed = False

    def _open(self) -> None:
        request, self._request = self._request, None
        if request is None:
            return
        try:
            response = self._http.send(request, stream=True)
        except httpx.HTTPError as error:
            self._closed = True
            raise _core.transport_error(error) from error
        self._response = response
        try:
            if response.status_code != 200:
                response.read()
            _check_answer(response)
        except httpx.HTTPError as error:
            self.close()
            raise _core.transport_error(error) from error
        except BaseException:
            self.close()
            raise
        self._chunks = response.iter_bytes()

    def __enter__(self) -> EventStream:
        self._open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> Event:
        if self._closed:
            raise StopIteration
        self._open()
        try:
            while True:
                while self._pending:
                    event = decode(self._pending.pop(0))
                    if event is not None:
                        return event
                assert self._chunks is not None
                chunk = next(self._chunks, None)
                if chunk is None:
                    self._parser.close()
                    self.close()
                    raise StopIteration
                self._pending.extend(self._parser.feed(chunk))
        except httpx.HTTPError as error:
            self.close()
            raise _core.transport_error(error) from error
        except StopIteration:
            raise
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._closed = True
        self._request = None
        response, self._response = self._response, None
        if response is not None:
            response.close()

    @property
    def closed(self) -> bool:
        return self._closed


class AsyncEventStream:
    """The asyncio twin of `EventStream`: an async iterator and async context manager."""

    def __init__(self, http: httpx.AsyncClient, request: httpx.Request) -> None:
        self._http = http
        self._request: httpx.Request | None = request
        self._response: httpx.Response | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._parser = SseParser()
        self._pending: list[SseEvent] = []
        self._closed = False

    async def _open(self) -> None:
        request, self._request = self._request, None
        if request is None:
            return
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as error:
            self._closed = True
            raise _core.transport_error(error) from error
        self._response = response
        try:
            if response.status_code != 200:
                await response.aread()
            _check_answer(response)
        except httpx.HTTPError as error:
            await self.aclose()
            raise _core.transport_error(error) from error
        except BaseException:
            await self.aclose()
            raise
        self._chunks = response.aiter_bytes()

    async def __aenter__(self) -> AsyncEventStream:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> Event:
        if self._closed:
            raise StopAsyncIteration
        await self._open()
        try:
            while True:
                while self._pending:
                    event = decode(self._pending.pop(0))
                    if event is not None:
                        return event
                assert self._chunks is not None
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    self._parser.close()
                    await self.aclose()
                    raise StopAsyncIteration from None
                self._pending.extend(self._parser.feed(chunk))
        except httpx.HTTPError as error:
            await self.aclose()
            raise _core.transport_error(error) from error
        except StopAsyncIteration:
            raise
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the connection (idempotent)."""
        self._closed = True
        self._request = None
        response, self._response = self._response, None
        if response is not None:
            await response.aclose()

    @property
    def closed(self) -> bool:
        return self._closed


__all__ = [
    "AsyncEventStream",
    "Event",
    "EventStream",
    "Lagged",
    "SseEvent",
    "SseParser",
    "Update",
    "decode",
]
