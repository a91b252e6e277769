"""The built-in modes' header parsing, token location and local JWT validation."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest

from aviso_builtins.auth.auth_o_tron import locate_token
from aviso_builtins.auth.headers import bearer_token, direct_credential
from aviso_builtins.auth.tokens import TokenVerifier, is_jwt_shaped
from aviso_plugins.types import AuthError, MalformedCredentials
from tests.support.tokens import SECRET, b64url, claims_for, mint, sign, sign_raw

TOKEN = mint("alice", "lab", ["reader"])


def without_token(value: object) -> str:
    """A test id that is the same in every process (``TOKEN``'s claims hold the time it was
    minted, and pytest-xdist workers must collect the same ids)."""
    return repr(value).replace(TOKEN, "<token>")


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("", "Authorization header cannot be empty"),
        ("  \t ", "Authorization header cannot be empty"),
        ("Digest abc", "Authorization header must use Bearer or Basic scheme"),
        ("Bearer", "Authorization header must use Bearer or Basic scheme"),
        ("Bearer\tabc", "Authorization header must use Bearer or Basic scheme"),
        ("Bearer   \t", "Authorization header must use Bearer or Basic scheme"),
        ("Basic  \t x", None),
        ("Bearer \t", "Authorization header must use Bearer or Basic scheme"),
        ("Basic \x7f", "Authorization header is not valid UTF-8"),
        ("Basic caf\xe9", "Authorization header is not valid UTF-8"),
    ],
)
def test_direct_header_defects(header: str, message: str | None) -> None:
    if message is None:
        assert direct_credential(header) == header.strip()
        return
    with pytest.raises(MalformedCredentials) as failure:
        direct_credential(header)
    assert failure.value.message == message
    assert failure.value.status == 401


def test_scheme_with_only_whitespace_after_it_has_no_space_once_trimmed() -> None:
    # The auth error catalogue lists "credentials cannot be empty", but a trimmed value never
    # ends in whitespace, so such a header is reported as lacking the scheme separator.
    with pytest.raises(MalformedCredentials, match="must use Bearer or Basic scheme"):
        direct_credential("Basic \t")


@pytest.mark.parametrize("header", ["  bearer opaque  ", "BASIC dXNlcjpwdw==", "Bearer a b"])
def test_direct_forwards_the_trimmed_value(header: str) -> None:
    assert direct_credential(header) == header.strip()


@pytest.mark.parametrize(
    "header", ["Basic abc", "Bearer", "Bearer a b", "Token x", "", "Bearer caf\xe9"]
)
def test_trusted_proxy_needs_exactly_bearer_and_token(header: str) -> None:
    with pytest.raises(MalformedCredentials, match="must use Bearer token"):
        bearer_token(header)


def test_trusted_proxy_token() -> None:
    assert bearer_token(" bearer\tabc ") == "abc"


# -- locating the token in auth-o-tron's answer ------------------------------------------


@pytest.mark.parametrize(
    ("header", "body", "expected"),
    [
        ([f"Bearer {TOKEN}"], b"authenticated", TOKEN),
        ([f"bearer   {TOKEN}"], b"", TOKEN),
        ([f"Bearer {TOKEN} extra"], b"", None),
        (["Bearer not-a-jwt"], f'{{"token":"{TOKEN}"}}'.encode(), TOKEN),
        ([], f'{{"jwt":" {TOKEN} "}}'.encode(), TOKEN),
        ([], f'{{"access_token":"{TOKEN}"}}'.encode(), TOKEN),
        ([], f'{{"token":null,"jwt":"{TOKEN}"}}'.encode(), TOKEN),
        ([], f'{{"token":"opaque","jwt":"{TOKEN}"}}'.encode(), None),
        ([], f'{{"token":5,"jwt":"{TOKEN}"}}'.encode(), None),
        ([], f'{{"token":"{TOKEN}","jwt":5}}'.encode(), None),
        ([], f'"{TOKEN}"'.encode(), TOKEN),
        ([], f"  {TOKEN}\n".encode(), TOKEN),
        ([], b"{}", None),
        ([], b"   ", None),
        ([], b"[1,2]", None),
        ([], b"a.b", None),
    ],
    ids=without_token,
)
def test_token_location(header: list[str], body: bytes, expected: str | None) -> None:
    assert locate_token(header, body) == expected


@pytest.mark.parametrize(
    ("text", "shaped"),
    [("a.b.c", True), ("a-_.B9.c", True), ("a..c", False), ("a.b.c.d", False), ("a.b.c=", False)],
)
def test_jwt_shape(text: str, shaped: bool) -> None:
    assert is_jwt_shaped(text) is shaped


# -- local validation ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def verifier() -> TokenVerifier:
    return TokenVerifier(SECRET)


def test_valid_token(verifier: TokenVerifier) -> None:
    caller = verifier.caller(mint("alice", "lab", ["reader", "x"], attributes={"k": "v"}))
    assert caller.username == "alice"
    assert caller.realm == "lab"
    assert caller.roles == frozenset({"reader", "x"})
    assert caller.attributes == {"k": "v"}


def test_optional_claims_default(verifier: TokenVerifier) -> None:
    token = sign({"alg": "HS256"}, {"sub": "bob", "exp": int(time.time()) + 60, "realm": None})
    caller = verifier.caller(token)
    assert (caller.username, caller.realm, caller.roles) == ("bob", None, frozenset())


@pytest.mark.parametrize(
    "changes",
    [
        {"exp": None},
        {"exp": True},
        {"exp": "9999999999"},
        {"exp": 9999999999.5},
        {"exp": int(time.time()) - 61 - 5},
        {"iat": "now"},
        {"iss": 5},
        {"username": 5},
        {"sub": ["x"]},
        {"realm": 1},
        {"roles": "admin"},
        {"roles": [1]},
        {"roles": None},
        {"attributes": {"k": 1}},
        {"attributes": []},
    ],
)
def test_claim_type_mismatches_are_invalid(
    verifier: TokenVerifier, changes: dict[str, object]
) -> None:
    claims = claims_for("alice", "lab", ["reader"])
    claims.update(changes)
    with pytest.raises(AuthError) as failure:
        verifier.caller(sign({"alg": "HS256"}, claims))
    assert (failure.value.status, failure.value.message) == (401, "Invalid or expired token")


def test_payload_must_be_an_object(verifier: TokenVerifier) -> None:
    head = b64url(b'{"alg":"HS256"}')
    body = b64url(b"[1]")
    signature = b64url(
        hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    )
    with pytest.raises(AuthError, match="Invalid or expired token"):
        verifier.caller(f"{head}.{body}.{signature}")


def test_missing_user_claims(verifier: TokenVerifier) -> None:
    with pytest.raises(AuthError, match="Token is missing required user claims"):
        verifier.caller(mint("alice", omit=["username", "sub"]))


# -- time claims and hostile payloads ------------------------------------------


NOW = 1_800_000_000


@pytest.fixture
def fixed_clock_verifier() -> TokenVerifier:
    return TokenVerifier(SECRET, clock=lambda: float(NOW), max_json_depth=8)


@pytest.mark.parametrize(
    ("changes", "accepted"),
    [
        ({"nbf": NOW + 3600}, False),
        ({"nbf": NOW + 61}, False),
        ({"nbf": NOW + 60}, True),
        ({"nbf": NOW - 3600}, True),
        ({"nbf": "0"}, False),
        ({"nbf": 1.5}, False),
        ({"iat": NOW + 365 * 86400}, False),
        ({"iat": NOW + 61}, False),
        ({"iat": NOW + 60}, True),
        ({"iat": 10**400}, False),
        ({"exp": 10**400}, True),
    ],
)
def test_nbf_and_iat_share_the_exp_leeway(
    fixed_clock_verifier: TokenVerifier, changes: dict[str, object], accepted: bool
) -> None:
    claims = {"sub": "alice", "iat": NOW, "exp": NOW + 3600, **changes}
    token = sign_raw(json.dumps(claims).encode())
    if accepted:
        assert fixed_clock_verifier.caller(token).username == "alice"
    else:
        with pytest.raises(AuthError) as failure:
            fixed_clock_verifier.caller(token)
        assert (failure.value.status, failure.value.message) == (401, "Invalid or expired token")


@pytest.mark.parametrize(
    "token",
    [
        sign_raw(b"[" * 100_000 + b"]" * 100_000),
        sign_raw(b'{"sub":"a","exp":9999999999,"x":' + b"[" * 9 + b"]" * 9 + b"}"),
        sign_raw(b'{"sub":"a","exp":9999999999}', header=b"[" * 100_000 + b"]" * 100_000),
        sign_raw(b"not json"),
        sign_raw(b"\xff\xfe"),
        sign_raw(b'{"sub":"a","exp":9999999999,"pad":"' + b"x" * 60_000 + b'","roles":7}'),
        sign_raw(b'{"sub":"a","exp":9999999999,"attributes":{"k":{"n":1}}}'),
    ],
    ids=["deep-payload", "just-over-depth", "deep-header", "non-json", "non-utf8", "huge", "types"],
)
def test_malformed_tokens_are_401_not_500(fixed_clock_verifier: TokenVerifier, token: str) -> None:
    with pytest.raises(AuthError) as failure:
        fixed_clock_verifier.caller(token)
    assert failure.value.status == 401


def test_nesting_at_the_depth_limit_is_accepted(fixed_clock_verifier: TokenVerifier) -> None:
    claims = b'{"sub":"a","exp":9999999999,"x":' + b"[" * 7 + b"]" * 7 + b"}"
    assert fixed_clock_verifier.caller(sign_raw(claims)).username == "a"
