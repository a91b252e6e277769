"""Auth conformance: trusted-proxy mode and local JWT validation.

The token rules hold in both modes, so they run against a trusted-proxy server and a direct
server (whose loopback auth-o-tron echoes any JWT-shaped bearer, leaving validation to aviso).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.conformance.auth_support import (
    NOTIFY,
    READS,
    REPLAY,
    WATCH,
    Deployment,
    assert_auth_error,
    body,
    both_modes,
    call,
    challenges,
    read_body,
)
from tests.support.tokens import basic, bearer, claims_for, mint, sign

INVALID = "Invalid or expired token"
MISSING_USER = "Token is missing required user claims"
REQUIRED = "Authentication is required for this stream"


@pytest.fixture(scope="module")
def deployments() -> Iterator[dict[str, Deployment]]:
    with both_modes() as deployments:
        yield deployments


@pytest.fixture(params=["trusted_proxy", "direct"])
def any_mode(request: pytest.FixtureRequest, deployments: dict[str, Deployment]) -> Deployment:
    return deployments[request.param]


@pytest.fixture
def proxy(deployments: dict[str, Deployment]) -> Deployment:
    return deployments["trusted_proxy"]


# -- trusted proxy ------------------------------------------------------------------------


def test_valid_token_accepted_without_outbound_call(proxy: Deployment) -> None:
    proxy.aot.reset()
    token = bearer(mint("reader-user", "localrealm", ["reader"]))
    for path in READS:
        assert call(proxy.client, path, read_body("protected_feed", path), token).status_code == 200
    admin = bearer(mint("admin-user", "localrealm", ["admin"]))
    assert call(proxy.client, NOTIFY, body("protected_feed"), admin).status_code == 200
    assert proxy.client.delete("/api/v1/admin/wipe/stream", headers=admin).status_code == 400
    assert proxy.aot.requests() == []


def test_basic_is_refused_in_trusted_proxy_mode(proxy: Deployment) -> None:
    credentials = basic("admin-user", "admin-pass")
    for path in READS:
        response = call(proxy.client, path, read_body("protected_feed", path), credentials)
        assert_auth_error(response, 401, REQUIRED)
        assert challenges(response) == ["Bearer"]
    admin = proxy.client.delete("/api/v1/admin/wipe/all", headers=credentials)
    assert_auth_error(admin, 401, "Authorization header must use Bearer token")
    assert challenges(admin) == ["Bearer"]
    # Basic on a public stream is as good as no header.
    assert call(proxy.client, NOTIFY, body("public_feed"), credentials).status_code == 200


@pytest.mark.parametrize(
    "value",
    ["Bearer", "Bearer a b", "Token abc", "bearer  x  y"],
    ids=["bare", "three", "scheme", "spaces"],
)
def test_other_malformed_bearers_on_admin(proxy: Deployment, value: str) -> None:
    response = proxy.client.delete("/api/v1/admin/wipe/all", headers={"Authorization": value})
    assert_auth_error(response, 401, "Authorization header must use Bearer token")


# -- algorithm and expiry -----------------------------------------------------------------


def _reader_claims(**changes: object) -> dict[str, object]:
    claims = claims_for("reader-user", "localrealm", ["reader"])
    claims.update(changes)
    return claims


REJECTED_TOKENS = {
    "hs512": sign({"alg": "HS512", "typ": "JWT"}, _reader_claims()),
    "hs384": sign({"alg": "HS384", "typ": "JWT"}, _reader_claims()),
    "alg-none": sign({"alg": "none", "typ": "JWT"}, _reader_claims()) + "AAAA",
    "alg-none-empty-signature": sign({"alg": "none", "typ": "JWT"}, _reader_claims()),
    "rs256": sign({"alg": "RS256", "typ": "JWT"}, _reader_claims()) + "AAAA",
    "no-exp": mint("reader-user", "localrealm", ["reader"], omit=["exp"]),
    "expired-5-min": mint("reader-user", "localrealm", ["reader"], exp_offset=-300),
    "expired-61-s": mint("reader-user", "localrealm", ["reader"], exp_offset=-75),
    "exp-as-text": sign({"alg": "HS256"}, _reader_claims(exp=str(int(time.time()) + 600))),
    "exp-as-float": sign({"alg": "HS256"}, _reader_claims(exp=time.time() + 600.5)),
}


@pytest.mark.parametrize("name", list(REJECTED_TOKENS))
def test_rejected_tokens(any_mode: Deployment, name: str) -> None:
    token = bearer(REJECTED_TOKENS[name])
    for path in READS:
        response = call(any_mode.client, path, read_body("protected_feed", path), token)
        assert_auth_error(response, 401, INVALID)
        assert challenges(response) == any_mode.challenges


def test_clock_skew_leeway(any_mode: Deployment) -> None:
    token = bearer(mint("reader-user", "localrealm", ["reader"], exp_offset=-30))
    assert (
        call(any_mode.client, WATCH, read_body("protected_feed", WATCH), token).status_code == 200
    )


# -- claims -----------------------------------------------------------------------------


def test_sub_is_the_user_name_without_username(any_mode: Deployment) -> None:
    # The ECPDS denial names the user, which shows the name aviso resolved.
    user = f"ecpds-user-sub21-{any_mode.mode}"
    token = bearer(mint(user, "localrealm", ["reader"], omit=["username"]))
    identifier = {"destination": "NOT-LISTED"}
    response = call(
        any_mode.client, WATCH, read_body("dissemination_ecpds", WATCH, identifier), token
    )
    assert_auth_error(
        response, 403, f"User '{user}' does not have access to destination 'NOT-LISTED'"
    )
    allowed = read_body("dissemination_ecpds", WATCH, {"destination": "CIP"})
    assert call(any_mode.client, WATCH, allowed, token).status_code == 200


def test_username_wins_over_sub(any_mode: Deployment) -> None:
    token = bearer(
        mint("ecpds-noaccess", "localrealm", ["reader"], sub=f"ecpds-user-{any_mode.mode}")
    )
    identifier = {"destination": "CIP"}
    response = call(
        any_mode.client, WATCH, read_body("dissemination_ecpds", WATCH, identifier), token
    )
    assert_auth_error(
        response, 403, "User 'ecpds-noaccess' does not have access to destination 'CIP'"
    )


def test_subonly_user_from_auth_o_tron(deployments: dict[str, Deployment]) -> None:
    client = deployments["direct"].client
    response = call(
        client, REPLAY, read_body("protected_feed", REPLAY), basic("subonly-user", "subonly-pass")
    )
    assert response.status_code == 200, response.text


def test_neither_username_nor_sub(any_mode: Deployment) -> None:
    token = bearer(mint("ghost", "localrealm", ["admin"], omit=["username", "sub"]))
    response = call(any_mode.client, NOTIFY, body("public_feed"), token)
    assert_auth_error(response, 401, MISSING_USER)


def test_audience_is_not_checked(any_mode: Deployment) -> None:
    for audience in ("somebody-else", ["a", "b"], "fake-aot"):
        token = bearer(mint("reader-user", "localrealm", ["reader"], aud=audience))
        response = call(any_mode.client, WATCH, read_body("protected_feed", WATCH), token)
        assert response.status_code == 200, (audience, response.text)


def test_iss_is_not_checked(any_mode: Deployment) -> None:
    token = bearer(mint("reader-user", "localrealm", ["reader"], iss="x"))
    assert (
        call(any_mode.client, WATCH, read_body("protected_feed", WATCH), token).status_code == 200
    )


def test_nbf_and_iat_in_the_future_are_refused(any_mode: Deployment) -> None:
    # Stricter than aviso-server's documentation ("nbf, iat not checked"): a token not yet valid, or
    # issued in the future, beyond the 60 s leeway of ``exp``, is 401.
    hour = int(time.time()) + 3600
    for claims in ({"nbf": hour}, {"iat": hour}):
        token = bearer(mint("reader-user", "localrealm", ["reader"], **claims))
        response = call(any_mode.client, WATCH, read_body("protected_feed", WATCH), token)
        assert_auth_error(response, 401, INVALID)


# -- public streams and malformed headers ---------------------------------------------------


def test_bad_signature_fails_even_on_a_public_stream(any_mode: Deployment) -> None:
    forged = bearer(mint("reader-user", "localrealm", ["reader"], secret="other-secret"))
    for path in (NOTIFY, *READS):
        payload = body("public_feed") if path == NOTIFY else read_body("public_feed", path)
        assert_auth_error(call(any_mode.client, path, payload, forged), 401, INVALID)
        assert call(any_mode.client, path, payload).status_code == 200


@pytest.mark.parametrize("event_type", ["public_feed", "declared_public"])
def test_malformed_header_is_anonymous_on_public_streams(
    any_mode: Deployment, event_type: str
) -> None:
    digest = {"Authorization": "Digest abc"}
    assert call(any_mode.client, NOTIFY, body(event_type), digest).status_code == 200
    for path in READS:
        assert call(any_mode.client, path, read_body(event_type, path), digest).status_code == 200


def test_malformed_header_is_anonymous_on_protected_streams(any_mode: Deployment) -> None:
    digest = {"Authorization": "Digest abc"}
    for path in (NOTIFY, *READS):
        payload = body("protected_feed") if path == NOTIFY else read_body("protected_feed", path)
        response = call(any_mode.client, path, payload, digest)
        assert_auth_error(response, 401, REQUIRED)
        assert challenges(response) == any_mode.challenges
