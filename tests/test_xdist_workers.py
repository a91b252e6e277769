"""How many pytest-xdist workers ``-n logical`` starts: two per CPU for the fast tier, whose
tests mostly wait, one per CPU for the heavy tier, whose tests compute."""

from __future__ import annotations

import pytest

from tests.conftest import selects_heavy


@pytest.mark.parametrize(
    ("expression", "heavy"),
    [
        ("not slow and not heavy", False),
        ("", False),
        ("slow", False),
        ("heavy and not slow", True),
        ("heavy", True),
        ("not slow and heavy", True),
    ],
)
def test_the_heavy_tier_is_told_by_its_marker_expression(expression: str, heavy: bool) -> None:
    assert selects_heavy(expression) is heavy
