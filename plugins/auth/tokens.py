"""Local JWT validation shared by both built-in modes.

PyJWT checks the JOSE envelope (base64url, header, ``alg`` allow-list, constant-time
signature compare); the claims are decoded here, because the contract is stricter than
PyJWT about types (``exp``, ``nbf`` and ``iat`` must be JSON integers, not ``"123"`` or
``1.5``) and looser about what it ignores (``aud``, ``iss``). ``exp``, ``nbf`` and ``iat``
share one leeway for clock skew. Whatever the token holds, a defect is a 401, never a 500.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import jwt
from jwt.algorithms import HMACAlgorithm

from aviso_plugins._shared.json_depth import exceeds_json_depth
from aviso_plugins.types import AuthError, Caller

INVALID_TOKEN = "Invalid or expired token"
MISSING_USER = "Token is missing required user claims"

ALGORITHM = "HS256"
CLOCK_SKEW_SECONDS = 60
DEFAULT_MAX_JSON_DEPTH = 64
"""``limits.max_json_depth``, which the host passes to auth providers as ``max_json_depth``."""
RECOMMENDED_SECRET_BYTES = 32
_EXACT_FLOAT_LIMIT = 2**53

_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", re.ASCII)

logger = logging.getLogger("aviso.auth")


def is_jwt_shaped(text: str) -> bool:
    """Three non-empty base64url segments: a structural test only."""
    return _JWT_SHAPE.fullmatch(text) is not None


class _HS256(HMACAlgorithm):
    # PyJWT warns on every verification with a key under 32 bytes. The secret is the
    # operator's (shared with auth-o-tron, any length is valid there), so the advice is
    # given once at startup instead of as a process-wide warning per request.
    def check_key_length(self, key: Any) -> None:
        return None


class TokenVerifier:
    """Turns an HS256 JWT signed with ``jwt_secret`` into a :class:`Caller`."""

    def __init__(
        self,
        secret: str,
        clock: Callable[[], float] = time.time,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    ) -> None:
        self._key = secret.encode()
        self._clock = clock
        self._max_json_depth = max_json_depth
        self._jws = jwt.PyJWS(algorithms=[])
        self._jws.register_algorithm(ALGORITHM, _HS256(HMACAlgorithm.SHA256))
        if len(self._key) < RECOMMENDED_SECRET_BYTES:
            logger.warning(
                "auth.jwt_secret is shorter than %d bytes; use a longer random secret",
                RECOMMENDED_SECRET_BYTES,
            )

    def caller(self, token: str) -> Caller:
        """Validate ``token``; raise :class:`AuthError` (401) on any defect."""
        try:
            payload = self._jws.decode_complete(token, key=self._key, algorithms=[ALGORITHM])
            text = payload["payload"].decode("utf-8")
            if exceeds_json_depth(text, self._max_json_depth):
                raise AuthError(401, INVALID_TOKEN)
            claims = json.loads(text)
        # RecursionError: a header nested too deep for PyJWT's own parser (the payload is
        # measured before parsing).
        except (jwt.PyJWTError, ValueError, RecursionError) as exc:
            raise AuthError(401, INVALID_TOKEN) from exc
        if not isinstance(claims, dict) or not self._claims_valid(claims):
            raise AuthError(401, INVALID_TOKEN)
        username = claims.get("username")
        if username is None:
            username = claims.get("sub")
        if username is None:
            raise AuthError(401, MISSING_USER)
        return Caller(
            username=username,
            realm=claims.get("realm"),
            roles=frozenset(claims.get("roles", ())),
            attributes=dict(claims.get("attributes", {})),
            expires_at=_expiry(claims["exp"], self._clock()),
        )

    def _claims_valid(self, claims: Mapping[str, Any]) -> bool:
        now = self._clock()
        exp = claims.get("exp")
        if not _is_integer(exp) or exp < now - CLOCK_SKEW_SECONDS:
            return False
        # Not valid yet, or issued in the future: both beyond the same leeway as ``exp``.
        for name in ("nbf", "iat"):
            if name in claims and (
                not _is_integer(claims[name]) or claims[name] > now + CLOCK_SKEW_SECONDS
            ):
                return False
        # Optional strings may be null (absent); lists and maps default only when missing.
        for name in ("username", "sub", "realm", "iss"):
            if claims.get(name) is not None and not isinstance(claims[name], str):
                return False
        roles = claims.get("roles", [])
        if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
            return False
        attributes = claims.get("attributes", {})
        return isinstance(attributes, dict) and all(
            isinstance(value, str) for value in attributes.values()
        )


def _expiry(exp: int, now: float) -> float | None:
    """When streams opened with this token close: at ``exp`` itself (the skew leeway only
    softens admission), or, for a token admitted although ``exp`` has passed, when the leeway
    ends: closing at once would have its client reconnect at once with the same token, in a
    loop, while after the leeway its reconnect meets the 401 that makes it refresh. An
    ``exp`` beyond exact float range never comes: no expiry."""
    if exp >= _EXACT_FLOAT_LIMIT:
        return None
    return float(exp) if exp > now else float(exp + CLOCK_SKEW_SECONDS)


def _is_integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
