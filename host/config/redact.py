"""Hide secrets before the effective configuration is shown (configuration chapter §1.6)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[REDACTED]"
SECRET_KEY_PARTS = ("password", "secret", "token", "authorization", "api_key")

# ``scheme://userinfo@`` where userinfo holds a user name, a password or a bare token.
# Greedy up to the last ``@`` of the authority, so a stray ``@`` in a password is masked too.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s]+@")


def redact(document: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``document`` with secret values and URL credentials masked."""
    return {key: _redact_entry(key, value) for key, value in document.items()}


def _redact_entry(key: Any, value: Any) -> Any:
    if isinstance(key, str) and any(part in key.lower() for part in SECRET_KEY_PARTS):
        return REDACTED
    return _redact_value(value)


def _redact_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return redact(value)
    if isinstance(value, list | tuple):
        return [_redact_value(item) for item in value]
    if isinstance(value, str):
        return mask_url_credentials(value)
    return value


def mask_url_credentials(text: str) -> str:
    return _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", text)
