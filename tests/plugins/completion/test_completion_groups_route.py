"""``GET /completion/groups``: outside the API's auth, so what it lists and what it costs are
bounded whoever calls it."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from aviso_builtins.completion import page
from aviso_plugins.state import ProcessLocalState
from tests.plugins.completion.support import config
from tests.plugins.completion.test_completion_auth import protected_config
from tests.plugins.completion.test_completion_consumer import consumer, member, run
from tests.support.server import running_server
from tests.support.tokens import bearer, mint


class CountedListings(ProcessLocalState):
    def __init__(self) -> None:
        super().__init__()
        self.listings = 0

    async def keys(self, prefix: str = "") -> list[str]:
        self.listings += 1
        return await super().keys(prefix)


def test_callers_at_once_on_a_process_that_is_not_the_active_one_share_one_read() -> None:
    async def scenario() -> None:
        state = CountedListings()
        active = consumer(state)
        await active.start()
        for step in (1, 2, 3):
            await active.consume(member(step, 0, step))
        await active.checkpoint()
        await active.close()
        # The last consumer constructed, never started: what a worker that is not the
        # active one serves the page from (the shared state).
        standby = consumer(state)
        state.listings = 0
        answers = await asyncio.gather(*(page.groups(None) for _ in range(50)))  # type: ignore[arg-type]
        assert state.listings == 1
        bodies = {bytes(answer.body) for answer in answers}
        assert len(bodies) == 1
        assert len(json.loads(bodies.pop())["groups"]) == 3
        del standby

    run(scenario())


def test_the_groups_of_a_source_that_requires_auth_are_not_listed() -> None:
    writer = bearer(mint("walter", roles=["writer"]))
    body = {"event_type": "ens", "identifier": {"run": "r1", "step": 3, "member": 0}}
    with running_server(protected_config()) as server, httpx.Client(base_url=server.url) as http:
        assert http.post("/api/v1/notification", json=body, headers=writer).status_code == 200
        listed = http.get("/completion/groups").json()
    assert listed == {"rules": [], "groups": [], "hidden": ["ens"]}


def test_an_open_group_is_listed_for_a_public_source() -> None:
    body = {"event_type": "ens", "identifier": {"run": "r1", "step": 3, "member": 0}}
    with running_server(config()) as server, httpx.Client(base_url=server.url) as http:
        assert http.post("/api/v1/notification", json=body).status_code == 200
        deadline = time.monotonic() + 60
        # The consumer counts it after the notify is answered (nothing to await).
        while not (listed := http.get("/completion/groups").json())["groups"]:
            assert time.monotonic() < deadline, listed
            time.sleep(0.1)
    ((group,),) = [listed["groups"]]
    assert group["values"] == {"run": "r1", "step": "3"}
    assert group["count"] == 1
