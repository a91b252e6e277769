"""pyaviso's one-shot commands against aviso-py: schema, notify, replay, admin (both backends)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.client.support import json_lines, payloads, publish, run
from tests.support.server import RunningServer


def test_schema_list_and_get(env: dict[str, str]) -> None:
    listed = run(env, "--json", "schema", "list")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"event_type": "feed"}
    got = run(env, "--json", "schema", "get", "feed")
    assert got.returncode == 0, got.stderr
    schema = json.loads(got.stdout)
    assert schema["status"] == "success" and schema["event_type"] == "feed"
    assert schema["schema"]["identifier"]["step"]["type"] == "IntHandler"
    unknown = run(env, "schema", "get", "nosuch")
    assert unknown.returncode != 0


def test_notify_with_typed_values_and_payload_then_replay(env: dict[str, str], name: str) -> None:
    sent = run(env, "--json", "notify", f'event=feed,name={name},step:=12,data={{"x":[1,2]}}')
    assert sent.returncode == 0, sent.stderr
    answer = json.loads(sent.stdout)
    assert answer["status"] == "success" and answer["request_id"] and answer["processed_at"]
    # --identifier supplements; without data the payload is null.
    sent = run(
        env, "notify", "event=feed", "--identifier", f"name={name}", "--identifier", "step:=3"
    )
    assert sent.returncode == 0, sent.stderr
    replayed = run(
        env, "--json", "replay", "--from", "0", "--event", "feed", "--identifier", f"name={name}"
    )
    assert replayed.returncode == 0, replayed.stderr
    got = json_lines(replayed.stdout)
    assert [(n["identifier"], n["payload"]) for n in got] == [
        ({"name": name, "step": "12"}, {"x": [1, 2]}),
        ({"name": name, "step": "3"}, None),
    ]
    assert got[1]["sequence"] > got[0]["sequence"]


def test_notify_refused_by_the_schema_is_a_clean_error(env: dict[str, str], name: str) -> None:
    refused = run(env, "notify", f"event=feed,name={name},step=notanumber")
    assert refused.returncode != 0
    assert "400" in refused.stderr or "INVALID_NOTIFICATION_REQUEST" in refused.stderr


def _replay(env: dict[str, str], name: str, start: str) -> list[dict]:
    done = run(
        env, "--json", "replay", "--from", start, "--event", "feed", "--identifier", f"name={name}"
    )
    assert done.returncode == 0, done.stderr
    return json_lines(done.stdout)


def test_replay_from_an_id_is_after_that_id(
    env: dict[str, str], name: str, feed_server: RunningServer
) -> None:
    publish(feed_server.url, name, 4)
    every = _replay(env, name, "0")
    assert payloads(every) == [0, 1, 2, 3]
    sequences = [n["sequence"] for n in every]
    # --from N means "after N": pyaviso sends from_id N+1.
    assert payloads(_replay(env, name, str(sequences[1]))) == [2, 3]
    assert _replay(env, name, str(sequences[3])) == []


def test_replay_from_a_date(env: dict[str, str], name: str, feed_server: RunningServer) -> None:
    publish(feed_server.url, name, 2)
    past = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert payloads(_replay(env, name, past)) == [0, 1]
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert _replay(env, name, future) == []


def test_replay_of_an_empty_history_ends_cleanly(env: dict[str, str], name: str) -> None:
    done = run(env, "replay", "--from", "0", "--event", "feed", "--identifier", f"name={name}")
    assert done.returncode == 0, done.stderr
    assert json_lines(done.stdout) == []
    assert "0 notifications delivered" in done.stderr


def test_admin_delete_and_wipe_need_yes(
    env: dict[str, str], name: str, feed_server: RunningServer
) -> None:
    publish(feed_server.url, name, 3)
    first, second, third = (n["sequence"] for n in _replay(env, name, "0"))
    refused = run(env, "admin", "delete", f"feed@{second}")
    assert refused.returncode != 0 and "--yes" in refused.stderr
    assert len(_replay(env, name, "0")) == 3
    deleted = run(env, "admin", "delete", "--yes", f"feed@{second}")
    assert deleted.returncode == 0, deleted.stderr
    assert [n["sequence"] for n in _replay(env, name, "0")] == [first, third]
    missing = run(env, "admin", "delete", "--yes", f"feed@{second}")
    assert missing.returncode != 0
    wiped = run(env, "admin", "wipe-stream", "--yes", "feed")
    assert wiped.returncode == 0, wiped.stderr
    assert _replay(env, name, "0") == []
    wiped = run(env, "admin", "wipe-all", "--yes")
    assert wiped.returncode == 0, wiped.stderr
