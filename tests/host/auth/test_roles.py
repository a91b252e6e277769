"""Realm-scoped role matching: roles given as ``realm:role``, a wildcard, and no realm."""

from __future__ import annotations

import pytest

from aviso_host.auth.roles import matches
from aviso_plugins.types import Caller

ADMIN = {"ops": ["admin"]}


@pytest.mark.parametrize(
    ("realm", "roles", "role_map", "expected"),
    [
        ("ops", ["admin"], ADMIN, True),
        ("ops", ["reader"], ADMIN, False),
        ("lab", ["admin"], ADMIN, False),
        (None, ["admin"], ADMIN, False),
        ("lab", [], {"lab": ["*"]}, True),
        ("lab", ["viewer"], {"lab": ["analyst", "viewer"], "ops": ["x"]}, True),
        ("external", ["admin"], {"internal": ["*"]}, False),
        ("lab", ["*"], {"lab": ["admin"]}, False),
        ("Lab", ["admin"], {"lab": ["admin"]}, False),
        ("lab", ["Admin"], {"lab": ["admin"]}, False),
        (None, [], {}, True),
    ],
)
def test_matches(
    realm: str | None, roles: list[str], role_map: dict[str, list[str]], expected: bool
) -> None:
    assert matches(Caller("u", realm, frozenset(roles)), role_map) is expected
