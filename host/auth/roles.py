"""Realm-scoped role matching."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aviso_plugins.types import Caller

RoleMap = Mapping[str, Sequence[str]]
"""Realm name -> role names (``admin_roles``, ``read_roles``, ``write_roles``)."""

WILDCARD_ROLE = "*"
"""In a configured list, any role of that realm (even none); a user's own ``*`` is plain."""


def matches(caller: Caller, roles: RoleMap) -> bool:
    """Whether ``caller`` holds one of the roles ``roles`` grants in the caller's realm."""
    if not roles:
        return True
    if caller.realm is None:
        return False
    granted = roles.get(caller.realm)
    if granted is None:
        return False
    return WILDCARD_ROLE in granted or any(role in caller.roles for role in granted)
