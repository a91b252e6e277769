"""Minting JWTs for tests, by hand so that broken tokens are easy too.

Written independently of the product's verifier: standard base64url, JSON and HMAC only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

SECRET = "test-jwt-secret"
OTHER_SECRET = "other-secret"
_HASHES = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign(header: Mapping[str, Any], claims: Mapping[str, Any], secret: str = SECRET) -> str:
    """A compact JWS of exactly these header and claims (``alg: none`` gets no signature)."""
    head = b64url(json.dumps(header, separators=(",", ":")).encode())
    body = b64url(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{head}.{body}".encode()
    digest = _HASHES.get(header.get("alg", ""))
    signature = b64url(hmac.new(secret.encode(), signing_input, digest).digest()) if digest else ""
    return f"{head}.{body}.{signature}"


def sign_raw(payload: bytes, header: bytes = b'{"alg":"HS256"}', secret: str = SECRET) -> str:
    """An HS256-signed token whose header and payload are any bytes, JSON or not."""
    head, body = b64url(header), b64url(payload)
    mac = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(mac)}"


def claims_for(
    username: str,
    realm: str | None = "localrealm",
    roles: Iterable[str] = (),
    exp_offset: int = 3600,
    **extra: Any,
) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": username,
        "username": username,
        "iss": "fake-aot",
        "aud": "fake-aot",
        "iat": now,
        "exp": now + exp_offset,
        "roles": list(roles),
        "attributes": {},
    }
    if realm is not None:
        claims["realm"] = realm
    claims.update(extra)
    return claims


def mint(
    username: str,
    realm: str | None = "localrealm",
    roles: Iterable[str] = (),
    exp_offset: int = 3600,
    secret: str = SECRET,
    alg: str = "HS256",
    omit: Iterable[str] = (),
    **extra: Any,
) -> str:
    """A token for ``username``; ``omit`` drops claims by name."""
    claims = claims_for(username, realm, roles, exp_offset, **extra)
    for name in omit:
        claims.pop(name, None)
    return sign({"alg": alg, "typ": "JWT"}, claims, secret)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
