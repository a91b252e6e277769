"""A completion event the notify API refuses, on a real server and both backends: group
values that fit the source's topic but take the completion event's topic (its longer base
and ``status``) over ``limits.max_topic_bytes``."""

from __future__ import annotations

import itertools

from tests.conformance.conftest import (  # noqa: F401  (fixtures and the parametrising hook)
    backend,
    for_backend,
    pytest_generate_tests,
)
from tests.plugins.completion.support import config
from tests.plugins.completion.test_completion_events import completion_events, notify
from tests.support.configs import ForBackend
from tests.support.server import running_server

MAX_TOPIC_BYTES = 48
_runs = itertools.count()


def test_a_refused_event_does_not_stop_the_oldest_open_groups_from_closing(
    for_backend: ForBackend,  # noqa: F811
) -> None:
    """The first group's incomplete event is refused when a second group closes it
    (``max_open_groups: 1``); a third group must still close the second, whose incomplete
    event is published."""
    document = config(max_open_groups=1, deadline_seconds=3600)
    document["limits"] = {"max_topic_bytes": MAX_TOPIC_BYTES}
    prefix = f"x{next(_runs)}"
    # "ens.<run>.1.0" fits; "ens_complete.<run>.1.incomplete" does not.
    long_run = prefix + "l" * (MAX_TOPIC_BYTES - len(f"ens.{prefix}.1.0"))
    with running_server(for_backend(document)) as server:
        notify(server.url, long_run, 1, 0)
        notify(server.url, f"{prefix}b", 1, 0)  # closes the long one: refused
        notify(server.url, f"{prefix}c", 1, 0)  # closes the second one
        (event,) = completion_events(server.url, f"{prefix}b", 1)
        assert event["identifier"]["status"] == "incomplete"
