"""Hide secrets before the effective configuration is shown.

A value is secret when its key names one (``password``, ``token``...), when a plugin's
options schema marks it ``"writeOnly": true`` (the key paths in ``secret_paths``), or when it
is a URL's credentials. The key of a plugin's own section (``auth.api_keys`` for a mode named
``api_keys``, the paths in ``plugin_sections``) is a name the plugin chose, not a secret, so
it is not judged by its name; what the section holds is. The same values are masked in free
text (logs, error messages) by :func:`mask_secrets`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any

from aviso_host.config.errors import KeyPath

REDACTED = "[REDACTED]"
SECRET_KEY_PARTS = ("password", "secret", "token", "authorization", "api_key")

MIN_MASKED_LENGTH = 8
"""Shorter secret values are not searched for in free text: eight characters is the least a
password or key can have to be worth keeping secret (NIST SP 800-63B's minimum), and shorter
ones are ordinary words and numbers that would be masked everywhere (they are still hidden
wherever the configuration is shown)."""

# ``scheme://userinfo@`` where userinfo holds a user name, a password or a bare token.
# Greedy up to the last ``@`` of the authority, so a stray ``@`` in a password is masked too.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s]+@")


def redact(
    document: Mapping[str, Any],
    secret_paths: Collection[KeyPath] = frozenset(),
    plugin_sections: Collection[KeyPath] = frozenset(),
) -> dict[str, Any]:
    """A copy of ``document`` with secret values and URL credentials masked."""
    return _redact_mapping(document, _Secrets(secret_paths, plugin_sections), ())


class _Secrets:
    def __init__(self, paths: Collection[KeyPath], plugin_sections: Collection[KeyPath]) -> None:
        self.paths = paths
        self.plugin_sections = plugin_sections

    def at(self, key: Any, path: KeyPath) -> bool:
        if path in self.paths:
            return True
        return path not in self.plugin_sections and _is_secret_key(key)


def _redact_mapping(
    document: Mapping[str, Any], secrets: _Secrets, path: KeyPath
) -> dict[str, Any]:
    return {
        key: REDACTED
        if secrets.at(key, (*path, key))
        else _redact_value(value, secrets, (*path, key))
        for key, value in document.items()
    }


def _is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and any(part in key.lower() for part in SECRET_KEY_PARTS)


def _redact_value(value: Any, secrets: _Secrets, path: KeyPath) -> Any:
    if isinstance(value, Mapping):
        return _redact_mapping(value, secrets, path)
    if isinstance(value, list | tuple):
        return [
            REDACTED
            if (*path, index) in secrets.paths
            else _redact_value(item, secrets, (*path, index))
            for index, item in enumerate(value)
        ]
    if isinstance(value, str):
        return mask_url_credentials(value)
    return value


def mask_url_credentials(text: str) -> str:
    return _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", text)


def secret_values(
    document: Mapping[str, Any],
    secret_paths: Collection[KeyPath],
    plugin_sections: Collection[KeyPath] = frozenset(),
) -> frozenset[str]:
    """The text of every secret in ``document``: strings (and mapping keys) below a secret
    key name or a ``secret_paths`` entry, for masking in free text."""
    found: set[str] = set()
    secrets = _Secrets(secret_paths, plugin_sections)

    def walk(value: Any, path: KeyPath, depth: int | None) -> None:
        """``depth``: levels below the secret value, ``None`` outside any secret."""
        if isinstance(value, Mapping):
            for key, item in value.items():
                # The keys of a secret mapping (an API-key map) are secrets; deeper keys
                # are its structure (``username``).
                if depth == 0 and isinstance(key, str):
                    found.add(key)
                walk(item, (*path, key), _below(depth, secrets.at(key, (*path, key))))
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                walk(item, (*path, index), _below(depth, (*path, index) in secret_paths))
        elif depth is not None and isinstance(value, str | int | float | bool):
            found.add(str(value))

    walk(document, (), None)
    return frozenset(text for text in found if len(text) >= MIN_MASKED_LENGTH)


def _below(depth: int | None, secret: bool) -> int | None:
    if depth is not None:
        return depth + 1
    return 0 if secret else None


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every whole occurrence of a secret (also as JSON string content) masked.

    A secret is masked only as a whole token: where it starts or ends with a letter, digit
    or underscore, the text next to it must not continue the word (a JSON escape such as
    ``\\n`` ends the word before it). So a secret never shows through, while text that only
    contains it (``ens_product`` beside a secret ``prod``) is left as it is.
    """
    pattern = _secrets_pattern(frozenset(secrets))
    return text if pattern is None else pattern.sub(REDACTED, text)


@lru_cache(maxsize=16)
def _secrets_pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    forms = {form for secret in secrets if secret for form in _forms(secret)}
    if not forms:
        return None
    # Longest first, so that a secret containing another is masked whole.
    alternatives = sorted(forms, key=len, reverse=True)
    return re.compile("|".join(_whole(form) for form in alternatives))


def _forms(secret: str) -> set[str]:
    """The secret as it is and as it reads inside a JSON string."""
    return {secret, json.dumps(secret, ensure_ascii=False)[1:-1]}


_WORD = re.compile(r"\w")
_NOT_AFTER_WORD = r"(?:(?<!\w)|(?<=\\[bfnrt]))"
_NOT_BEFORE_WORD = r"(?!\w)"


def _whole(form: str) -> str:
    start = _NOT_AFTER_WORD if _WORD.match(form[0]) else ""
    end = _NOT_BEFORE_WORD if _WORD.match(form[-1]) else ""
    return f"{start}{re.escape(form)}{end}"
