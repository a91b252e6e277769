"""What the Spark tests check against (replayed history, an open live watch), and files
dropped into a watched folder."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from aviso_spark.example_data import IDENTIFIER_COLUMNS, write
from tests.spark.conftest import AvisoSetup
from tests.support.sse import DEFAULT_TIMEOUT, Stream

EVENT_TYPE = "dissemination"
DESTINATIONS = 5  # dissemination_rows spreads rows over <prefix>0 .. <prefix>4
WAIT_SECONDS = 60.0


def notify_body(row: dict[str, Any], destination: str | None = None) -> dict[str, Any]:
    """The notification of an example row: its identifier columns (``destination`` in place
    of the row's own, when given), its path and size as the payload."""
    identifier = {name: row[name] for name in IDENTIFIER_COLUMNS}
    if destination is not None:
        identifier["destination"] = destination
    return {
        "event_type": EVENT_TYPE,
        "identifier": identifier,
        "payload": {"path": row["path"], "size": row["size"]},
    }


def notify_rows(
    client: httpx.Client, rows: Iterable[dict[str, Any]], destination: str | None = None
) -> None:
    """Notify every row (:func:`notify_body`), one after the other; each must be stored."""
    for row in rows:
        response = client.post(
            "/api/v1/notification", content=json.dumps(notify_body(row, destination))
        )
        assert response.status_code == 200, response.text


def row_id(cloud_event: dict[str, Any]) -> int:
    """The example row a notification came from (its payload path's file name)."""
    return int(Path(cloud_event["data"]["payload"]["path"]).stem)


def replayed_row_ids(aviso: AvisoSetup, destinations: list[str] | None = None) -> Counter[int]:
    """Row id of every stored notification, with counts."""
    seen: Counter[int] = Counter()
    if destinations is None:
        destinations = [f"{aviso.prefix}{index}" for index in range(DESTINATIONS)]
    with httpx.Client(base_url=aviso.server.url, timeout=DEFAULT_TIMEOUT) as client:
        for destination in destinations:
            body = {
                "event_type": EVENT_TYPE,
                "identifier": {"destination": destination, "class": "od"},
                "from_id": "1",
            }
            with client.stream("POST", "/api/v1/replay", content=json.dumps(body)) as response:
                assert response.status_code == 200, response.read()
                for event in Stream(response).events():
                    if event.kind == "connection-closing":
                        assert event.data["reason"] == "end_of_stream", event.raw
                        break
                    if event.name == "replay":
                        seen[row_id(event.data)] += 1
    return seen


def drop_file(inbox: Path, staging: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """Write outside the watched folder, then rename in: Spark never sees half a file."""
    draft = staging / name
    write(rows, draft, "csv")
    os.replace(draft, inbox / name)


class LiveWatch:
    """A live watch read by a thread; ``wait_for(n)`` blocks until n notifications came.

    The server sends heartbeats (``sse_heartbeat_interval_sec`` of the test config), so the
    reading thread sees the stop request within one interval.
    """

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        self.url = url
        self.body = body
        self.row_ids: Counter[int] = Counter()
        self._changed = threading.Condition()
        self._established = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, name="live-watch", daemon=True)

    def __enter__(self) -> LiveWatch:
        self._thread.start()
        assert self._established.wait(WAIT_SECONDS), f"watch not established: {self._error}"
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(WAIT_SECONDS)

    def _read(self) -> None:
        try:
            with (
                httpx.Client(base_url=self.url, timeout=DEFAULT_TIMEOUT) as client,
                client.stream("POST", "/api/v1/watch", content=json.dumps(self.body)) as response,
            ):
                assert response.status_code == 200, response.read()
                for event in Stream(response).events():
                    if event.kind == "live-notification/connection_established":
                        self._established.set()
                    elif event.kind == "live-notification":
                        with self._changed:
                            self.row_ids[row_id(event.data)] += 1
                            self._changed.notify_all()
                    if self._stop.is_set() or event.name == "connection-closing":
                        return
        except BaseException as exc:  # reported by wait_for / __enter__
            self._error = exc
            with self._changed:
                self._changed.notify_all()

    def wait_for(self, count: int) -> Counter[int]:
        """The row ids seen once ``count`` notifications arrived (fails after a bound)."""
        with self._changed:
            arrived = self._changed.wait_for(
                lambda: self._error is not None or self.row_ids.total() >= count, WAIT_SECONDS
            )
            assert self._error is None, self._error
            assert arrived, f"{self.row_ids.total()} of {count} notifications arrived"
            return Counter(self.row_ids)
