"""Security: hostile tokens, a hanging auth-o-tron, and the whole
access matrix checked against an independent model of roles, stream policies and authorisers.

The matrix test sends every principal (directory users, minted and forged tokens, Basic in
trusted-proxy mode, malformed headers, anonymous) to every operation on every stream and
every admin route, in both modes, and counts wrongful accepts (must be 0) and wrongful
denials (must be 0 too: the model and the server agree case by case).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conformance.auth_support import (
    NOTIFY,
    REPLAY,
    SCHEMAS,
    WATCH,
    Deployment,
    assert_auth_error,
    body,
    both_modes,
    call,
    read_body,
)
from tests.support.fake_auth_o_tron import DIRECTORY
from tests.support.fake_ecpds import TABLE_A, lookup
from tests.support.tokens import OTHER_SECRET, basic, bearer, claims_for, mint, sign

ADMIN_ROLES = {"localrealm": ["admin"]}
TIMEOUT_MS = 1000
HANG_MARGIN_SECONDS = 5.0
"""Room for a loaded machine; well short of the 30 s hang, or of 20 checks waited one by one."""


@pytest.fixture(scope="module")
def deployments() -> Iterator[dict[str, Deployment]]:
    with both_modes() as deployments:
        yield deployments


@pytest.fixture(scope="module")
def impatient_deployments() -> Iterator[dict[str, Deployment]]:
    """As ``deployments``, the direct server giving auth-o-tron ``TIMEOUT_MS`` to answer."""
    with both_modes(client_timeout=15.0, timeout_ms=TIMEOUT_MS) as deployments:
        yield deployments


@pytest.fixture(scope="module")
def matrix_deployments() -> Iterator[dict[str, Deployment]]:
    """As ``deployments``, with a generous auth-o-tron deadline: the matrix tests decisions,
    and a loaded machine must not turn a slow answer into a (wrongful) 503."""
    with both_modes(client_timeout=30.0, timeout_ms=20000) as deployments:
        yield deployments


@pytest.fixture(params=["direct", "trusted_proxy"])
def deployment(request: pytest.FixtureRequest, deployments: dict[str, Deployment]) -> Deployment:
    return deployments[request.param]


# -- hostile tokens --------------------------------------------------------------------------

HOSTILE = {
    "other-secret": mint("admin-user", "localrealm", ["admin"], secret=OTHER_SECRET),
    "alg-none": sign({"alg": "none"}, claims_for("admin-user", "localrealm", ["admin"])),
    "alg-none-signed": sign({"alg": "none"}, claims_for("admin-user", "localrealm", ["admin"]))
    + "c2ln",
    "alg-NONE": sign({"alg": "NONE"}, claims_for("admin-user", "localrealm", ["admin"])) + "c2ln",
    "hs512": sign({"alg": "HS512"}, claims_for("admin-user", "localrealm", ["admin"])),
    "expired": mint("admin-user", "localrealm", ["admin"], exp_offset=-600),
    "tampered": mint("reader-user", "localrealm", ["reader"])[:-4] + "AAAA",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_tokens_are_rejected_everywhere(deployment: Deployment, name: str) -> None:
    headers = bearer(HOSTILE[name])
    for path, payload in (
        (NOTIFY, body("public_feed")),
        (NOTIFY, body("protected_feed")),
        (WATCH, read_body("protected_feed", WATCH)),
        (REPLAY, read_body("wildcard_feed", REPLAY)),
    ):
        assert_auth_error(call(deployment.client, path, payload, headers), 401)
    assert_auth_error(deployment.client.delete("/api/v1/admin/wipe/all", headers=headers), 401)


def test_token_without_realm_is_never_privileged(deployment: Deployment) -> None:
    headers = bearer(mint("admin-user", None, ["admin", "producer", "analyst"]))
    assert_auth_error(deployment.client.delete("/api/v1/admin/wipe/all", headers=headers), 403)
    assert_auth_error(call(deployment.client, NOTIFY, body("protected_feed"), headers), 403)
    assert_auth_error(call(deployment.client, NOTIFY, body("producer_feed"), headers), 403)
    for event_type in ("admin_read_feed", "wildcard_feed", "split_feed"):
        response = call(deployment.client, WATCH, read_body(event_type, WATCH), headers)
        assert_auth_error(response, 403)


def test_roles_in_another_realm_grant_nothing(deployment: Deployment) -> None:
    headers = bearer(mint("admin-user", "partnerrealm", ["admin", "producer", "analyst"]))
    assert_auth_error(deployment.client.delete("/api/v1/admin/wipe/all", headers=headers), 403)
    assert_auth_error(call(deployment.client, NOTIFY, body("producer_feed"), headers), 403)
    for event_type in ("admin_read_feed", "wildcard_feed", "split_feed"):
        response = call(deployment.client, REPLAY, read_body(event_type, REPLAY), headers)
        assert_auth_error(response, 403)


def test_basic_in_trusted_proxy_mode_is_401(deployments: dict[str, Deployment]) -> None:
    client = deployments["trusted_proxy"].client
    for user, entry in DIRECTORY.items():
        headers = basic(user, entry.password)
        assert_auth_error(call(client, NOTIFY, body("protected_feed"), headers), 401)
        assert_auth_error(client.delete("/api/v1/admin/wipe/all", headers=headers), 401)


# -- a hanging auth-o-tron ----------------------------------------------------------------


def test_hanging_auth_o_tron_gives_503_within_the_timeout(
    impatient_deployments: dict[str, Deployment],
) -> None:
    setup = impatient_deployments["direct"]
    setup.aot.delay_seconds = 30.0
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=20) as pool:
            futures = [
                pool.submit(
                    call,
                    setup.client,
                    NOTIFY,
                    body("public_feed"),
                    basic("reader-user", "reader-pass"),
                )
                for _ in range(20)
            ]
            responses = [future.result() for future in futures]
        elapsed = time.monotonic() - started
    finally:
        setup.aot.delay_seconds = 0.0
    for response in responses:
        assert_auth_error(response, 503, "Authentication service temporarily unavailable")
    assert elapsed < TIMEOUT_MS / 1000 + HANG_MARGIN_SECONDS, elapsed
    # Anonymous traffic never waits for auth-o-tron.
    assert call(setup.client, NOTIFY, body("public_feed")).status_code == 200


# -- the access matrix --------------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    name: str
    headers: Mapping[str, str]
    username: str | None = None
    """``None``: anonymous (no header, or a malformed one)."""
    realm: str | None = None
    roles: Sequence[str] = ()
    invalid: bool = False
    """Credentials that must be refused wherever they are looked at."""
    malformed: bool = False


def principals(mode: str) -> list[Principal]:
    people: list[Principal] = [
        Principal("anonymous", {}),
        Principal("digest", {"Authorization": "Digest abc"}, malformed=True),
        Principal("bearer-alone", {"Authorization": "Bearer"}, malformed=True),
    ]
    for user, entry in DIRECTORY.items():
        if mode == "direct":
            people.append(
                Principal(
                    f"basic:{user}", basic(user, entry.password), user, entry.realm, entry.roles
                )
            )
            people.append(Principal(f"basic-wrong:{user}", basic(user, "wrong"), invalid=True))
        else:
            people.append(Principal(f"basic:{user}", basic(user, entry.password), malformed=True))
        token = mint(user, entry.realm, entry.roles, omit=entry.omit)
        people.append(Principal(f"jwt:{user}", bearer(token), user, entry.realm, entry.roles))
    people += [
        Principal(
            "jwt:star", bearer(mint("star", "localrealm", ["*"])), "star", "localrealm", ["*"]
        ),
        Principal(
            "jwt:roleless", bearer(mint("roleless", "localrealm", [])), "roleless", "localrealm"
        ),
        Principal(
            "jwt:ecpds-user-matrix",
            bearer(mint("ecpds-user-matrix", "localrealm", ["reader"])),
            "ecpds-user-matrix",
            "localrealm",
            ["reader"],
        ),
    ]
    people += [
        Principal(f"hostile:{name}", bearer(token), invalid=True) for name, token in HOSTILE.items()
    ]
    if mode == "direct":
        people += [
            Principal(f"scripted:{user}", basic(user, "x"), invalid=True)
            for user in (
                "deny-user",
                "boom-user",
                "teapot-user",
                "expired-user",
                "badsig-user",
                "no-token-user",
            )
        ]
    return people


def model_matches(principal: Principal, roles: Mapping[str, Sequence[str]]) -> bool:
    """Role matching, written out independently of the host's implementation."""
    if principal.realm is None or principal.realm not in roles:
        return False
    granted = roles[principal.realm]
    return "*" in granted or bool(set(granted) & set(principal.roles))


def model_allows(principal: Principal, operation: str, event_type: str | None) -> bool:
    if principal.invalid:
        return False
    if event_type is None:  # admin route
        return (
            principal.username is not None
            and not principal.malformed
            and model_matches(principal, ADMIN_ROLES)
        )
    stream_auth: dict[str, Any] | None = SCHEMAS[event_type].get("auth")
    if not stream_auth or not stream_auth["required"]:
        return True
    anonymous = principal.username is None or principal.malformed
    if anonymous:
        return False
    if model_matches(principal, ADMIN_ROLES):
        return True
    if operation == "notify":
        return "write_roles" in stream_auth and model_matches(principal, stream_auth["write_roles"])
    if "read_roles" in stream_auth and not model_matches(principal, stream_auth["read_roles"]):
        return False
    if "ecpds" in stream_auth.get("plugins", ()):
        status, answer = lookup(TABLE_A, principal.username or "")
        listed = {
            record["name"]
            for record in (answer or {}).get("destinationList", ())
            if record.get("active") is True and isinstance(record.get("name"), str)
        }
        return status == 200 and answer.get("success") == "yes" and "CIP" in listed
    return True


def _request(
    client: httpx.Client, principal: Principal, operation: str, event_type: str | None
) -> int:
    if event_type is None:
        return client.delete(f"/api/v1/admin/{operation}", headers=principal.headers).status_code
    identifier = {"destination": "CIP"} if "ecpds" in event_type else {"name": "m"}
    if operation == "notify":
        return call(client, NOTIFY, body(event_type, identifier), principal.headers).status_code
    path = WATCH if operation == "watch" else REPLAY
    return call(
        client, path, read_body(event_type, path, identifier), principal.headers
    ).status_code


ADMIN_OPERATIONS = ("notification/public_feed@999999", "wipe/stream")


@pytest.mark.heavy  # every principal against every operation, in both modes
def test_zero_wrongful_accepts_over_the_whole_matrix(
    matrix_deployments: dict[str, Deployment],
) -> None:
    deployments = matrix_deployments
    cases: list[tuple[str, Principal, str, str | None]] = []
    for mode in deployments:
        for principal in principals(mode):
            for event_type in SCHEMAS:
                for operation in ("notify", "watch", "replay"):
                    cases.append((mode, principal, operation, event_type))
            for operation in ADMIN_OPERATIONS:
                cases.append((mode, principal, operation, None))

    def run(case: tuple[str, Principal, str, str | None]) -> tuple[bool, int]:
        mode, principal, operation, event_type = case
        return model_allows(principal, operation, event_type), _request(
            deployments[mode].client, principal, operation, event_type
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(run, cases))
    wrongful_accepts = []
    wrongful_denials = []
    for case, (allowed, status) in zip(cases, outcomes, strict=True):
        accepted = status not in (401, 403, 500, 503)
        label = (case[0], case[1].name, case[2], case[3], status)
        if accepted and not allowed:
            wrongful_accepts.append(label)
        elif allowed and not accepted:
            wrongful_denials.append(label)
    print(f"access matrix: {len(cases)} cases, {len(wrongful_accepts)} wrongful accepts")
    assert len(cases) > 1000
    assert wrongful_accepts == []
    assert wrongful_denials == []
