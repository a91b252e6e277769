"""Completion events on a real server, on both backends: the derived event type in the
schema API, one complete event per group, an incomplete one at the deadline, watched and
replayed like any other event type (and with pyaviso: tests/client/test_completion.py)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conformance.conftest import (  # noqa: F401  (fixtures and the parametrising hook)
    backend,
    for_backend,
    pytest_generate_tests,
)
from tests.plugins.completion.support import config
from tests.support.configs import ForBackend
from tests.support.server import RunningServer, running_server
from tests.support.sse import Stream

WAIT = 30.0
SHORT = "ens_deadline"
"""The ensemble schema again, with a short deadline: the deadline test's (the other groups
complete long before theirs, however slowly the machine runs)."""
SHORT_DEADLINE = 15
"""Seconds a group of the deadline test has: its four notifies must all be stored within it,
on a loaded machine too, and the test waits for it to pass."""
_runs = itertools.count()


@pytest.fixture(scope="module")
def ens_server(for_backend: ForBackend) -> Iterator[RunningServer]:  # noqa: F811
    document = config(expected_count=None, expected_values=[0, 1, 2, 3, 4])
    short = copy.deepcopy(document["notification_schema"]["ens"])
    short["topic"]["base"] = SHORT
    short["completion"].update(event_type=f"{SHORT}_complete", deadline_seconds=SHORT_DEADLINE)
    document["notification_schema"][SHORT] = short
    with running_server(for_backend(document)) as server:
        yield server


@pytest.fixture
def run() -> str:
    """A ``run`` value of this test's own (servers and NATS streams are shared)."""
    return f"r{next(_runs)}"


def notify(
    url: str, run: str, step: int, member: int, key: str | None = None, event_type: str = "ens"
) -> None:
    identifier = {"run": run, "step": str(step), "member": str(member)}
    body = {"event_type": event_type, "identifier": identifier}
    headers = {"Idempotency-Key": key} if key else {}
    answer = httpx.post(f"{url}/api/v1/notification", json=body, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text


def completion_events(
    url: str, run: str, count: int, event_type: str = "ens_complete"
) -> list[dict[str, Any]]:
    """The first ``count`` completion events of ``run``, from the oldest retained, as a
    watch from the beginning delivers them (history, then live, until ``count`` came)."""
    body = {"event_type": event_type, "identifier": {"run": run}, "from_id": "0"}
    events = []
    with httpx.stream("POST", f"{url}/api/v1/watch", json=body, timeout=WAIT) as response:
        assert response.status_code == 200
        for event in Stream(response).events():
            if "specversion" in event.data:
                events.append(event.data["data"])
                if len(events) == count:
                    return events
    raise AssertionError(f"{len(events)} of {count} completion events")


def test_the_derived_event_type_is_in_the_schema_api(ens_server: RunningServer) -> None:
    answer = httpx.get(f"{ens_server.url}/api/v1/schema/ens_complete", timeout=10).json()
    schema = answer["schema"]
    assert set(schema["identifier"]) == {"run", "step", "status"}
    assert schema["identifier"]["status"]["type"] == "EnumHandler"
    listed = httpx.get(f"{ens_server.url}/api/v1/schema", timeout=10).text
    assert "ens_complete" in listed
    assert all(not field.get("required") for field in schema["identifier"].values())


def test_one_complete_event_per_group_whatever_is_published_again(
    ens_server: RunningServer, run: str
) -> None:
    url = ens_server.url
    for member in (0, 1, 2, 3):
        notify(url, run, 24, member)
    notify(url, run, 24, 1)  # published again
    notify(url, run, 24, 2, key=f"{run}-again")
    notify(url, run, 24, 2, key=f"{run}-again")  # a retried request
    notify(url, run, 24, 4)
    notify(url, run, 24, 0)  # after completion
    (complete,) = completion_events(url, run, 1)
    assert complete["identifier"]["status"] == "complete"
    assert complete["identifier"]["step"] == "24"
    payload = complete["payload"]
    assert payload["count"] == 5 and payload["expected"] == 5 and payload["missing"] == []


def test_the_deadline_gives_one_incomplete_event_naming_the_missing(
    ens_server: RunningServer, run: str
) -> None:
    url = ens_server.url
    for member in (0, 1, 2, 4):
        notify(url, run, 6, member, event_type=SHORT)
    (incomplete,) = completion_events(url, run, 1, f"{SHORT}_complete")
    assert incomplete["identifier"]["status"] == "incomplete"
    assert incomplete["payload"]["missing"] == [3] and incomplete["payload"]["count"] == 4
    notify(url, run, 6, 3, event_type=SHORT)  # late data completes the group
    events = completion_events(url, run, 2, f"{SHORT}_complete")
    assert [event["identifier"]["status"] for event in events] == ["incomplete", "complete"]
