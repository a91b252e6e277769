"""Parsing the ``Authorization`` header of the built-in modes.

Defects raise :class:`MalformedCredentials` with the catalogue's message; the host decides
whether that means 401 (admin paths) or anonymous (everywhere else).
"""

from __future__ import annotations

from aviso_plugins.types import MalformedCredentials

NOT_TEXT = "Authorization header is not valid UTF-8"
EMPTY = "Authorization header cannot be empty"
WRONG_SCHEME = "Authorization header must use Bearer or Basic scheme"
NOT_BEARER = "Authorization header must use Bearer token"

_DIRECT_SCHEMES = frozenset({"bearer", "basic"})


def _is_visible_text(value: str) -> bool:
    # What an HTTP header value may portably hold: visible ASCII, space and tab.
    return all(char == "\t" or " " <= char <= "~" for char in value)


def direct_credential(header: str) -> str:
    """The trimmed header, forwarded verbatim: ``Bearer`` or ``Basic`` plus something.

    A bearer credential's shape is not checked: opaque tokens go to auth-o-tron too. The
    catalogue's "credentials cannot be empty" case cannot arise: after trimming, whatever
    follows the first space is never blank.
    """
    if not _is_visible_text(header):
        raise MalformedCredentials(NOT_TEXT)
    value = header.strip()
    if not value:
        raise MalformedCredentials(EMPTY)
    scheme, space, _ = value.partition(" ")
    if not space or scheme.lower() not in _DIRECT_SCHEMES:
        raise MalformedCredentials(WRONG_SCHEME)
    return value


def bearer_token(header: str) -> str:
    """The token of ``Bearer <token>``: exactly two whitespace-separated parts."""
    parts = header.split() if _is_visible_text(header) else []
    if len(parts) != 2 or parts[0].lower() != "bearer":
        raise MalformedCredentials(NOT_BEARER)
    return parts[1]
