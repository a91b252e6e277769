"""The completion goal on JetStream with ``--workers 2``: 2,091 members shuffled, 5 %
published again, sent to two instances sharing one JetStream, one instance killed (SIGKILL)
halfway: exactly 41 complete events, one incomplete naming the missing member, none twice
(the scenario is ``benchmarks.completion.goal``, which also measures the delays)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.completion import GOAL_MEMBERS, GOAL_STEPS, goal
from tests.support.nats import NatsServer

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(600)]


def test_exactly_one_event_per_group_across_workers_and_a_killed_instance(
    nats_session: NatsServer, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    found = goal(tmp_path, nats_session.url, workers=2)
    assert found["complete_steps"] == list(range(GOAL_STEPS))
    assert found["incomplete"] == 1
    assert found["incomplete_missing"] == [GOAL_MEMBERS - 1]
    assert found["duplicated"] == 0
