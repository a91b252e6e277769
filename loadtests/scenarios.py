"""The locust users: notify, watch (SSE fan-out) and replay, and the profiles built from them.

Importing this module imports locust, which monkey-patches the process for gevent: only the
locust child process (:mod:`aviso_loadtests.child`) imports it.

Streaming requests are measured here, not by locust: for ``stream=True`` locust reports the
time to the response headers only (its ``... headers`` entries). Each stream is read as its
bytes arrive (:func:`read_available`), parsed incrementally, and the figures that matter are
fired as request events of type ``SSE``:

- ``watch: first event``: request sent -> first SSE event (``connection_established``);
- ``watch: first notification``: request sent -> first notification delivered on it;
- ``watch: delivery``: per notification, receive time minus the ``sent_at`` the publisher put
  in the payload (both clocks are this machine's wall clock);
- ``replay: end_of_stream``: request sent -> ``end_of_stream``, with the number of replayed
  events in the request context (events/s are derived from it).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from locust import FastHttpUser, constant, constant_throughput, task

from aviso_loadtests import identifiers
from aviso_loadtests.sse import SSEEvent, SSEParser, StreamClosed, read_available

JSON_HEADERS = {"Content-Type": "application/json"}
WATCH_BODY = json.dumps(identifiers.WATCH_FILTER)
REPLAY_BODY = json.dumps(identifiers.REPLAY_FILTER)
# A closed stream the user did not ask for is an error, except when its maximum age is reached.
EXPECTED_CLOSES = {"max_duration_reached"}


class AvisoUser(FastHttpUser):
    abstract = True
    network_timeout = 30.0
    connection_timeout = 10.0

    def fire(
        self,
        name: str,
        milliseconds: float,
        length: int = 0,
        exception: BaseException | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        self.environment.events.request.fire(
            request_type="SSE",
            name=name,
            response_time=milliseconds,
            response_length=length,
            exception=exception,
            context=dict(context or {}),
        )


class NotifyUser(AvisoUser):
    """Publishes realistic dissemination/mars notifications; the pace is set by configure()."""

    wait_time = constant(0)
    make_body: ClassVar[staticmethod[[random.Random, str], str]] = staticmethod(
        identifiers.notify_mix
    )
    request_name = "notify"

    def on_start(self) -> None:
        self.rng = random.Random()
        self.date = identifiers.today()

    @task
    def notify(self) -> None:
        self.client.post(
            "/api/v1/notification",
            data=self.make_body(self.rng, self.date),
            headers=JSON_HEADERS,
            name=self.request_name,
        )


class WatchPublisher(NotifyUser):
    """One user publishing what every watcher follows, at ``watch_rate`` per second."""

    fixed_count = 1
    make_body = staticmethod(identifiers.watched)
    request_name = "notify (watched)"
    start_delay = 0.0  # seconds before the first notification; set by configure()

    def on_start(self) -> None:
        super().on_start()
        time.sleep(self.start_delay)  # gevent-patched: only this user waits


class _Streaming(AvisoUser):
    abstract = True

    def open_stream(self, path: str, body: str, name: str) -> tuple[float, Any]:
        """POST and return (perf_counter at send, raw response) or (start, None) on failure.

        Locust fires ``name`` itself with the time to the headers (all it measures of a stream).
        """
        start = time.perf_counter()
        response = self.client.post(path, data=body, headers=JSON_HEADERS, name=name, stream=True)
        raw = getattr(response, "_response", None)
        if response.status_code != 200 or raw is None:
            if raw is not None:
                raw.release()
            return start, None
        return start, raw


def sse_events(raw: Any, parser: SSEParser) -> Iterator[tuple[SSEEvent, float, float]]:
    """Every event of the body as its bytes arrive, with time.time() and perf_counter() then.

    Reads to the end of the body: nothing is left unread on the connection.
    """
    while chunk := read_available(raw):
        wall, perf = time.time(), time.perf_counter()
        for event in parser.feed(chunk):
            yield event, wall, perf


class WatchUser(_Streaming):
    """Holds one watch open and reads every byte of it until the run ends."""

    wait_time = constant(1)  # before re-opening a stream that the server ended

    @task
    def watch(self) -> None:
        start, raw = self.open_stream("/api/v1/watch", WATCH_BODY, "watch: headers")
        if raw is None:
            return
        parser = SSEParser()
        notified = False
        try:
            for event, received, perf in sse_events(raw, parser):
                elapsed_ms = (perf - start) * 1000
                if event.event == "live-notification":
                    body = json.loads(event.data)
                    if body.get("type") == "connection_established":
                        self.fire("watch: first event", elapsed_ms, len(event.data))
                        continue
                    sent_at = _sent_at(body)
                    if sent_at is None:
                        continue  # a notification not stamped by this load test
                    self.fire("watch: delivery", (received - sent_at) * 1000, len(event.data))
                    if not notified:
                        notified = True
                        self.fire("watch: first notification", elapsed_ms)
                elif event.event == "connection-closing":
                    reason = json.loads(event.data).get("reason")
                    if reason not in EXPECTED_CLOSES:
                        self.fire("watch: closed", 0, exception=StreamClosed(str(reason)))
                elif event.event == "error":
                    self.fire("watch: error event", 0, exception=RuntimeError(event.data))
            self.fire("watch: stream ended", 0, exception=StreamClosed("body ended"))
        except (StreamClosed, OSError, ValueError) as exc:
            self.fire("watch: stream", (time.perf_counter() - start) * 1000, exception=exc)
        finally:
            raw.release()


def _sent_at(body: Mapping[str, Any]) -> float | None:
    data = body.get("data")
    payload = data.get("payload") if isinstance(data, dict) else None
    sent_at = payload.get("sent_at") if isinstance(payload, dict) else None
    return float(sent_at) if isinstance(sent_at, int | float) else None


class ReplayUser(_Streaming):
    """Replays the seeded history from sequence 1 to ``end_of_stream``, back to back."""

    wait_time = constant(0)
    expected = 0  # the seeded history size; set by configure()

    @task
    def replay(self) -> None:
        start, raw = self.open_stream("/api/v1/replay", REPLAY_BODY, "replay: headers")
        if raw is None:
            return
        parser = SSEParser()
        events = 0
        ended_ms: float | None = None
        problem: BaseException | None = None
        try:
            for event, _, perf in sse_events(raw, parser):
                if event.event == "replay":
                    events += 1
                elif event.event == "connection-closing":
                    reason = json.loads(event.data).get("reason")
                    if reason == "end_of_stream":
                        ended_ms = (perf - start) * 1000
                    else:
                        problem = StreamClosed(str(reason))
                elif event.event == "error":
                    problem = RuntimeError(event.data)
        except (StreamClosed, OSError, ValueError) as exc:
            problem = exc
        finally:
            raw.release()
        if problem is None and ended_ms is None:
            problem = StreamClosed("no end_of_stream")
        if problem is None and self.expected and events != self.expected:
            problem = AssertionError(f"replayed {events} events, expected {self.expected}")
        self.fire(
            "replay: end_of_stream",
            ended_ms if ended_ms is not None else (time.perf_counter() - start) * 1000,
            parser.bytes_seen,
            exception=problem,
            context={"events": events},
        )


SCENARIOS = ("notify", "watch", "replay", "mixed")
# mixed: of every 10 users, 6 watch, 3 notify and 1 replays (plus the watched publisher).
MIXED_WEIGHTS = {"WatchUser": 6, "NotifyUser": 3, "ReplayUser": 1}


def configure(spec: Mapping[str, Any]) -> tuple[list[type[AvisoUser]], int]:
    """The user classes of ``spec["scenario"]`` with their pace set; and the user count."""
    scenario = spec["scenario"]
    users = int(spec["users"])
    rate = float(spec.get("rate") or 0)
    ReplayUser.expected = int(spec.get("history") or 0)
    WatchPublisher.wait_time = constant_throughput(float(spec.get("watch_rate") or 1))
    delay = spec.get("publish_delay")
    if delay is None and scenario == "watch":
        delay = (users + 1) / spawn_rate(spec, users + 1) + 1  # publish once all watch
    WatchPublisher.start_delay = float(delay or 0)
    if scenario == "notify":
        classes: list[type[AvisoUser]] = [NotifyUser]
        notifiers = users
    elif scenario == "watch":
        return [WatchPublisher, WatchUser], users + 1
    elif scenario == "replay":
        return [ReplayUser], users
    elif scenario == "mixed":
        classes = [WatchPublisher, WatchUser, NotifyUser, ReplayUser]
        for cls in classes[1:]:
            cls.weight = MIXED_WEIGHTS[cls.__name__]
        notifiers = max(1, round(users * MIXED_WEIGHTS["NotifyUser"] / 10))
        users += 1
    else:
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    NotifyUser.wait_time = constant_throughput(rate / notifiers) if rate > 0 else constant(0)
    return classes, users


def spawn_rate(spec: Mapping[str, Any], users: int) -> float:
    """Users started per second: ``spec["spawn_rate"]``, else all within a second up to 100/s."""
    return float(spec.get("spawn_rate") or min(users, 100))
