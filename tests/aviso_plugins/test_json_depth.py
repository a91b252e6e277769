"""The nesting measure used before parsing client JSON (admin bodies, JWT payloads)."""

from __future__ import annotations

import pytest

from aviso_plugins._shared.json_depth import exceeds_json_depth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("[]", 1),
        ('{"a":[{"b":[]}]}', 4),
        ('["[[[[[[", "{{{{"]', 1),
        ('["\\"[[[[", []]', 2),
        ("[]" * 1000, 1),
        ('["unterminated \\" [[[[', 1),
        ("[" * 10_000 + "]" * 10_000, 10_000),
    ],
)
def test_depth_is_measured_outside_strings(text: str, depth: int) -> None:
    assert not exceeds_json_depth(text, depth)
    assert exceeds_json_depth(text, depth - 1) is (depth > 0)
