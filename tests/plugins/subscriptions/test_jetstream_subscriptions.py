"""Subscriptions on JetStream: two instances of one deployment (real servers on one real
nats-server) see the same subscriptions, cursors, deletes and caps; a push subscription is
delivered by exactly one of them, and by the other once that one stops."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any, ClassVar

from aviso_builtins.subscriptions import served
from aviso_plugins import hookimpl
from aviso_plugins.testing import AvisoClient, serve
from aviso_plugins.types import DeliveryAttempt, DeliveryKind, DeliveryResult, PreparedDelivery
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.nats import NatsServer

SUBSCRIPTIONS = "/api/v1/subscriptions"
WAIT = 30.0


class Tally(DeliveryKind):
    """Delivers by recording (its own instance, the subscription, the sequence)."""

    kind = "tally"
    delivery_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "required": ["kind"],
        "properties": {"kind": {"const": "tally"}},
    }
    delivered: ClassVar[queue.Queue[tuple[int, str, int]]] = queue.Queue()

    async def prepare(self, delivery: Mapping[str, Any]) -> PreparedDelivery:
        return PreparedDelivery(stored=dict(delivery), shown=dict(delivery))

    def public_view(self, stored: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"kind": "tally"}

    async def deliver(self, attempt: DeliveryAttempt) -> DeliveryResult:
        sequence = attempt.notification.record.sequence
        Tally.delivered.put((id(self), attempt.subscription, sequence))
        return DeliveryResult("delivered")


class TallyPlugin:
    @hookimpl
    def aviso_delivery_kinds(self) -> list[type[DeliveryKind]]:
        return [Tally]


def config(nats: NatsServer, **subscriptions: Any) -> dict[str, Any]:
    base = f"g{uuid.uuid4().hex[:8]}"
    document = with_changes(
        API_EXAMPLE,
        notification_backend={"kind": "jetstream", "jetstream": {"nats_url": nats.url}},
        watch_endpoint={"replay_batch_delay_ms": 0},
        subscriptions=subscriptions,
    )
    document["notification_schema"]["river_gauge"]["topic"]["base"] = base
    return document


def body(basin: str) -> dict[str, Any]:
    return {"event_type": "river_gauge", "identifier": {"basin": basin}}


def notify(aviso: AvisoClient, basin: str, count: int) -> None:
    for level in range(count):
        identifier = {"basin": basin, "date": "20260402", "level": level % 10}
        assert aviso.notify("river_gauge", identifier, {"n": level}).status_code == 200


def tally_of(client: AvisoClient) -> DeliveryKind:
    """The instance of ``Tally`` the server of ``client`` delivers with."""
    assert client.app is not None
    subscriptions = served(client.app.state.service.plugin_access)
    assert subscriptions is not None
    return subscriptions.runner.kinds["tally"]


def unique_name() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_every_instance_sees_one_subscription_its_cursor_and_its_delete(
    module_nats: NatsServer,
) -> None:
    document = config(module_nats)
    name = unique_name()
    with serve(document) as one, serve(document) as two:
        assert one.put(f"{SUBSCRIPTIONS}/{name}", json=body("rhine")).status_code == 201
        assert two.put(f"{SUBSCRIPTIONS}/{name}", json=body("rhine")).status_code == 200
        assert two.put(f"{SUBSCRIPTIONS}/{name}", json=body("elbe")).status_code == 409
        assert [view["name"] for view in two.get(SUBSCRIPTIONS).json()["subscriptions"]] == [name]
        notify(one, "rhine", 5)
        with two.stream("GET", f"{SUBSCRIPTIONS}/{name}/events") as events:
            ids = []
            for line in events.iter_lines():
                if line.startswith("id: "):
                    ids.append(int(line[4:]))
                if len(ids) == 5:
                    break
        # Acknowledged on the other instance: up to what was delivered, never beyond.
        ack = one.post(f"{SUBSCRIPTIONS}/{name}/ack", json={"sequence": ids[2]})
        assert ack.status_code == 200, ack.text
        assert ack.json()["acknowledged_sequence"] == ids[2]
        assert ack.json()["pending"] == 2
        beyond = one.post(f"{SUBSCRIPTIONS}/{name}/ack", json={"sequence": ids[4] + 1})
        assert beyond.status_code == 400
        assert two.get(f"{SUBSCRIPTIONS}/{name}").json()["acknowledged_sequence"] == ids[2]
        # A stream opened on one instance ends when the subscription is deleted on the other.
        with one.stream("GET", f"{SUBSCRIPTIONS}/{name}/events") as events:
            lines = events.iter_lines()
            resumed = next(int(line[4:]) for line in lines if line.startswith("id: "))
            assert resumed == ids[3]
            assert two.delete(f"{SUBSCRIPTIONS}/{name}").status_code == 204
            rest = list(lines)  # the stream ends at its next check
        assert any("end_of_stream" in line for line in rest), rest
        assert one.get(f"{SUBSCRIPTIONS}/{name}").status_code == 404


def test_the_per_user_cap_holds_across_instances(module_nats: NatsServer) -> None:
    document = config(module_nats, max_per_user=3)
    with serve(document) as one, serve(document) as two:
        for view in one.get(SUBSCRIPTIONS).json()["subscriptions"]:
            one.delete(f"{SUBSCRIPTIONS}/{view['name']}")
        statuses: list[int] = []

        def put(client: AvisoClient, index: int) -> None:
            response = client.put(f"{SUBSCRIPTIONS}/cap-{index}", json=body("rhine"))
            statuses.append(response.status_code)

        threads = [
            threading.Thread(target=put, args=(one if index % 2 else two, index))
            for index in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        held = one.get(SUBSCRIPTIONS).json()["subscriptions"]
        assert len(held) <= 3
        assert statuses.count(201) == len(held)
        assert set(statuses) <= {201, 429}
        for view in held:
            one.delete(f"{SUBSCRIPTIONS}/{view['name']}")


def test_one_instance_delivers_a_push_subscription_and_the_other_takes_over(
    module_nats: NatsServer,
) -> None:
    document = config(module_nats)
    name = unique_name()
    while not Tally.delivered.empty():
        Tally.delivered.get_nowait()

    def delivered(count: int) -> list[tuple[int, str, int]]:
        return [Tally.delivered.get(timeout=WAIT) for _ in range(count)]

    with ExitStack() as first, ExitStack() as second:
        one = first.enter_context(serve(document, plugins=[TallyPlugin()]))
        two = second.enter_context(serve(document, plugins=[TallyPlugin()]))
        put = two.put(
            f"{SUBSCRIPTIONS}/{name}", json={**body("rhine"), "delivery": {"kind": "tally"}}
        )
        assert put.status_code == 201, put.text
        notify(two, "rhine", 10)
        batch = delivered(10)
        assert [sequence for _, _, sequence in batch] == list(range(1, 11))
        (holder,) = {instance for instance, _, _ in batch}
        wait_for(lambda: one.get(f"{SUBSCRIPTIONS}/{name}").json()["acknowledged_sequence"] == 10)
        # The delivering instance stops; the other delivers what follows, from the cursor.
        kinds = {id(tally_of(client)): stack for client, stack in ((one, first), (two, second))}
        staying = two if kinds[holder] is first else one
        kinds[holder].close()
        notify(staying, "rhine", 10)
        batch = delivered(10)
        assert [sequence for _, _, sequence in batch] == list(range(11, 21))
        assert {instance for instance, _, _ in batch} == {id(tally_of(staying))}
        wait_for(  # recorded once the attempt returned
            lambda: staying.get(f"{SUBSCRIPTIONS}/{name}").json()["deliveries"]["delivered"] == 20
        )
        assert Tally.delivered.empty()
        staying.delete(f"{SUBSCRIPTIONS}/{name}")
