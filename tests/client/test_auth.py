"""pyaviso's credentials against aviso-py's authentication (direct mode through the
auth-o-tron stand-in, trusted_proxy with JWTs), and the re-authorisation extensions:
an expired token is refreshed and the stream resumes, a revoked one stops the listener.

Authentication does not depend on the storage backend: these run on in-memory only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyaviso
import pytest

from tests.client.support import client_env, json_lines, listening, run, server_event
from tests.conformance.auth_support import document
from tests.support.fake_auth_o_tron import FakeAuthOTron, fake_auth_o_tron
from tests.support.fake_ecpds import fake_ecpds
from tests.support.server import RunningServer, running_server
from tests.support.tokens import bearer, mint

REPLAY_ARGS = ("--event", "protected_feed", "--identifier", "name=n1")
MAX_AUTH_REQUESTS = 2
"""A rejected credential may be tried again once (pyaviso refreshes once on 401), no more."""
ENTITLED = (200, {"success": "yes", "destinationList": [{"name": "CIP", "active": True}]})
REVOKED = (200, {"success": "yes", "destinationList": [{"name": "FOO", "active": True}]})


@pytest.fixture(scope="module")
def direct() -> Iterator[tuple[FakeAuthOTron, RunningServer]]:
    with fake_auth_o_tron() as aot, running_server(document("direct", aot.url)) as server:
        yield aot, server


def _notify_as_admin(env: dict[str, str], n: int) -> None:
    admin = {**env, "AVISO_USERNAME": "admin-user", "AVISO_PASSWORD": "admin-pass"}
    sent = run(admin, "notify", f'event=protected_feed,name=n1,data={{"n":{n}}}')
    assert sent.returncode == 0, sent.stderr


def test_basic_and_bearer_credentials_in_direct_mode(
    direct: tuple[FakeAuthOTron, RunningServer], tmp_path: Path
) -> None:
    aot, server = direct
    env = client_env(tmp_path / "home", server.url)
    _notify_as_admin(env, 1)
    anonymous = run(env, "replay", "--from", "0", *REPLAY_ARGS)
    assert anonymous.returncode != 0
    aot.reset()
    basic = {**env, "AVISO_USERNAME": "reader-user", "AVISO_PASSWORD": "reader-pass"}
    replayed = run(basic, "--json", "replay", "--from", "0", *REPLAY_ARGS)
    assert replayed.returncode == 0, replayed.stderr
    assert [n["payload"] for n in json_lines(replayed.stdout)][-1] == {"n": 1}
    assert aot.requests()[0]["authorization"].startswith("Basic ")
    aot.reset()
    token = {**env, "AVISO_TOKEN": mint("reader-user", "localrealm", ["reader"])}
    replayed = run(token, "--json", "replay", "--from", "0", *REPLAY_ARGS)
    assert replayed.returncode == 0, replayed.stderr
    assert [n["payload"] for n in json_lines(replayed.stdout)][-1] == {"n": 1}
    assert [r["authorization"][:7] for r in aot.requests()] == ["Bearer "]


def test_a_wrong_password_is_a_clean_failure_without_a_retry_storm(
    direct: tuple[FakeAuthOTron, RunningServer], tmp_path: Path
) -> None:
    aot, server = direct
    env = client_env(
        tmp_path / "home", server.url, AVISO_USERNAME="reader-user", AVISO_PASSWORD="wrong"
    )
    aot.reset()
    replayed = run(env, "replay", "--from", "0", *REPLAY_ARGS)
    assert replayed.returncode != 0
    assert "authentication rejected" in replayed.stderr
    assert 1 <= len(aot.requests()) <= MAX_AUTH_REQUESTS
    aot.reset()
    with listening(env, "--no-state-store", *REPLAY_ARGS) as listener:
        assert listener.exited() != 0  # it gives up by itself
    assert 1 <= len(aot.requests()) <= MAX_AUTH_REQUESTS


def _write_credentials(path: Path, token: str) -> None:
    """pyaviso's credentials file, replaced atomically (the client may read it at any time)."""
    staged = path.with_suffix(".staged")
    staged.write_text(json.dumps({"bearer": {"token": token}}))
    staged.replace(path)


def test_an_expired_token_is_refreshed_and_the_stream_resumes(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials.yaml"
    admin = bearer(mint("admin-user", "localrealm", ["admin"]))
    with (
        running_server(document("trusted_proxy")) as server,
        httpx.Client(base_url=server.url, headers=admin) as producer,
        server_event("stream.auth.expired") as expired,
    ):

        def send(n: int) -> None:
            body = {"event_type": "protected_feed", "identifier": {"name": "n1"}, "payload": n}
            assert producer.post("/api/v1/notification", json=body).status_code == 200

        # Minted only now, with room to renew it (below) before it expires.
        _write_credentials(credentials, mint("reader-user", "localrealm", ["reader"], exp_offset=6))
        with (
            pyaviso.AvisoClient(
                base_url=server.url, auth=pyaviso.ConfigFile(credentials)
            ) as client,
            # From the start of history: notification 1 arrives whenever the stream opens.
            client.listen("protected_feed", filter={"name": "n1"}, start_from=0) as live,
        ):
            send(1)
            assert next(live).payload == 1
            # The user renews the token; the old one is still in use until the server ends the
            # stream at its expiry (end_of_stream, cause auth_expired).
            assert not expired.is_set()
            _write_credentials(credentials, mint("reader-user", "localrealm", ["reader"]))
            assert expired.wait(30.0)
            send(2)
            assert next(live).payload == 2


def test_a_revoked_destination_stops_the_listener_with_403(tmp_path: Path) -> None:
    with fake_ecpds() as ecpds:
        doc = document("trusted_proxy", "", [ecpds.url])
        doc["ecpds"]["recheck_seconds"] = 1
        user = "revocable-client-user"
        ecpds.set_answer(user, ENTITLED)
        token = mint(user, "localrealm", ["reader"])
        admin = bearer(mint("admin-user", "localrealm", ["admin"]))
        with running_server(doc) as server:
            where = {"destination": "CIP", "class": "od"}
            body = {"event_type": "dissemination_ecpds", "identifier": where}
            sent = httpx.post(f"{server.url}/api/v1/notification", json=body, headers=admin)
            assert sent.status_code == 200, sent.text
            with (
                pyaviso.AvisoClient(base_url=server.url, auth=pyaviso.Bearer(token)) as client,
                client.listen(
                    "dissemination_ecpds", filter={"destination": "CIP"}, start_from=0
                ) as live,
            ):
                next(live)  # admitted and streaming
                ecpds.set_answer(user, REVOKED)
                with pytest.raises(pyaviso.HttpError) as failure:
                    next(live)
    assert failure.value.status == 403
