"""``Idempotency-Key`` re-use against ``aviso-server serve --workers 2`` on JetStream.

Each worker has its own memory of the keys it stored; JetStream drops a re-used
``Nats-Msg-Id`` without comparing it. Whichever worker answers, a notify is acknowledged only
when its own notification is the one the broker keeps under the key. Every request goes
on a fresh connection, so the two workers share the requests between them. Everything is
real: the ``aviso-server`` child, a ``nats-server -js`` child, httpx clients on 127.0.0.1.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import psutil
import pytest

from tests.host.backends.jetstream_support import (
    Aviso,
    aviso_serving,
    document,
    poll,
    replay,
)
from tests.support.nats import NatsServer
from tests.support.tokens import SECRET, bearer, mint

pytestmark = pytest.mark.heavy

NOTIFY = "/api/v1/notification"
ROUNDS = 12
START_TIMEOUT = 60.0
REPLAYED = "Idempotent-Replayed"


def schema(base: str, allow_duplicates: bool) -> dict[str, Any]:
    return {
        "topic": {"base": base, "key_order": ["name"]},
        "identifier": {"name": {"type": "StringHandler", "required": True}},
        "payload": {"required": False},
        "storage_policy": {"allow_duplicates": allow_duplicates},
    }


@pytest.fixture(scope="module")
def workers(nats_session: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Aviso]:
    """Two workers with auth on (JWTs a trusted proxy would forward); both schemas stay
    writable by anyone, anonymous clients included."""
    content = document(
        nats_session.url,
        schemas={
            "feed": schema(f"feed{uuid.uuid4().hex[:8]}", allow_duplicates=True),
            "latest": schema(f"latest{uuid.uuid4().hex[:8]}", allow_duplicates=False),
        },
    )
    content["notification_schema_strict"] = True
    content["auth"] = {
        "enabled": True,
        "mode": "trusted_proxy",
        "jwt_secret": SECRET,
        "admin_roles": {"localrealm": ["admin"]},
    }
    directory = tmp_path_factory.mktemp("idempotency-workers")
    with aviso_serving(directory, content, "--workers", "2") as server:
        poll(lambda: ready(server), START_TIMEOUT, "/ready")
        yield server


def ready(server: Aviso) -> bool:
    try:
        return httpx.get(f"{server.url}/ready", timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


def notify(
    server: Aviso, event_type: str, name: str, payload: Any, key: str, **headers: str
) -> httpx.Response:
    """One notify on a connection of its own (a worker chosen by the operating system);
    the answering worker's pid is noted in ``ANSWERED_BY``."""
    body = {"event_type": event_type, "identifier": {"name": name}, "payload": payload}
    with server.client() as client:
        answer = client.post(NOTIFY, json=body, headers={"Idempotency-Key": key, **headers})
        # Read while the connection is still open: the worker holding its other end.
        client_port = answer.extensions["network_stream"].get_extra_info("client_addr")[1]
        ANSWERED_BY[id(answer)] = worker_holding(server, client_port)
        return answer


ANSWERED_BY: dict[int, int] = {}


def worker_holding(server: Aviso, client_port: int) -> int:
    """The pid of the worker with the server side of the connection from ``client_port``."""
    for child in psutil.Process(server.process.pid).children():
        try:
            connections = child.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        for connection in connections:
            if (
                connection.laddr
                and connection.laddr.port == server.port
                and connection.raddr
                and connection.raddr.port == client_port
            ):
                return child.pid
    raise AssertionError(f"no worker holds the connection from port {client_port}")


def payloads(server: Aviso, event_type: str, name: str) -> list[Any]:
    with server.client() as client:
        return [event["data"]["payload"] for event in replay(client, event_type, {"name": name})]


def code_of(answer: httpx.Response) -> str:
    return answer.json().get("code", "") if answer.status_code >= 400 else ""


def test_a_key_taken_first_by_another_client_never_acknowledges_the_producer(
    workers: Aviso,
) -> None:
    """The attack: another client posts a different notification with the producer's
    predictable key first. The producer's every try is refused, none acknowledged."""
    name = f"n{uuid.uuid4().hex[:8]}"
    answers: list[tuple[int, str]] = []
    producer_workers: set[int] = set()
    for round_ in range(ROUNDS):
        key = f"spark-{round_}-{uuid.uuid4().hex}"
        taken = notify(workers, "feed", name, {"by": "attacker", "round": round_}, key)
        assert taken.status_code == 200, taken.text
        for attempt in range(2):
            answer = notify(workers, "feed", name, {"by": "producer", "try": attempt}, key)
            answers.append((answer.status_code, code_of(answer)))
            producer_workers.add(ANSWERED_BY[id(answer)])
    assert answers == [(422, "IDEMPOTENCY_KEY_REUSED")] * (2 * ROUNDS)
    # Both workers answered the producer: the one that stored the attacker's notification
    # (and remembers the key) and the one that did not.
    assert len(producer_workers) == 2
    stored = payloads(workers, "feed", name)
    assert [payload["by"] for payload in stored] == ["attacker"] * ROUNDS


def test_a_re_send_is_replayed_by_whichever_worker_answers(workers: Aviso) -> None:
    name = f"n{uuid.uuid4().hex[:8]}"
    replayed: list[Mapping[str, Any]] = []
    for round_ in range(ROUNDS // 2):
        key = f"key-{round_}-{uuid.uuid4().hex}"
        first = notify(workers, "feed", name, {"round": round_}, key)
        assert first.status_code == 200, first.text
        assert REPLAYED.lower() not in first.headers
        for _ in range(2):
            again = notify(workers, "feed", name, {"round": round_}, key)
            assert again.status_code == 200, again.text
            replayed.append({"header": again.headers.get(REPLAYED), "keys": sorted(again.json())})
    expected = {"header": "true", "keys": ["processed_at", "request_id", "status"]}
    assert replayed == [expected] * ROUNDS
    assert payloads(workers, "feed", name) == [{"round": index} for index in range(ROUNDS // 2)]


def test_two_users_identical_keys_both_store_and_anonymous_cannot_squat(workers: Aviso) -> None:
    name = f"n{uuid.uuid4().hex[:8]}"
    key = f"spark-{uuid.uuid4().hex}"
    alice, bob = bearer(mint("alice")), bearer(mint("bob"))
    # Anonymous first, then two users with the same key: three scopes, three notifications.
    for writer, headers in (("anonymous", {}), ("bob", bob), ("alice", alice)):
        answer = notify(workers, "feed", name, {"by": writer}, key, **headers)
        assert answer.status_code == 200, answer.text
        assert REPLAYED.lower() not in answer.headers
    # Each user's re-send is its own; another notification of its own under it is refused.
    for writer, headers in (("alice", alice), ("bob", bob)):
        again = notify(workers, "feed", name, {"by": writer}, key, **headers)
        assert (again.status_code, again.headers.get(REPLAYED)) == (200, "true")
        other = notify(workers, "feed", name, {"by": writer, "v": 2}, key, **headers)
        assert (other.status_code, code_of(other)) == (422, "IDEMPOTENCY_KEY_REUSED")
    stored = payloads(workers, "feed", name)
    assert sorted(payload["by"] for payload in stored) == ["alice", "anonymous", "bob"]


def test_a_re_send_whose_notification_was_replaced_is_refused(workers: Aviso) -> None:
    name = f"n{uuid.uuid4().hex[:8]}"
    key = f"key-{uuid.uuid4().hex}"
    assert notify(workers, "latest", name, {"v": 1}, key).status_code == 200
    # One message per subject: the newer notification replaces the keyed one.
    assert notify(workers, "latest", name, {"v": 2}, f"other-{key}").status_code == 200
    answers = [notify(workers, "latest", name, {"v": 1}, key) for _ in range(4)]
    assert [(answer.status_code, code_of(answer)) for answer in answers] == [
        (422, "IDEMPOTENCY_KEY_NOT_RETAINED")
    ] * 4
    assert payloads(workers, "latest", name) == [{"v": 2}]
