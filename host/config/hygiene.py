"""Text hygiene of the auth rules: no blank or whitespace-padded names.

A padded role or secret almost always comes from a copy-paste accident and would never
match at runtime, so it fails startup instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aviso_host.config.errors import KeyPath, at


def is_padded(text: str) -> bool:
    return text != text.strip()


def require_clean(path: KeyPath, text: str) -> None:
    """Fail unless ``text`` is non-blank and carries no surrounding whitespace."""
    if not text.strip():
        raise at(path, "must not be blank")
    if is_padded(text):
        raise at(path, "must not have leading or trailing whitespace")


def check_role_map(path: KeyPath, roles: Mapping[str, Sequence[str]]) -> None:
    """Realm keys and role names clean, and every realm granting at least one role."""
    for realm, names in roles.items():
        if not realm.strip():
            raise at(path, "realm names must not be blank")
        if is_padded(realm):
            raise at(path, f"realm name {realm!r} must not have leading or trailing whitespace")
        if not names:
            raise at((*path, realm), "must list at least one role")
        for index, name in enumerate(names):
            require_clean((*path, realm, index), name)
