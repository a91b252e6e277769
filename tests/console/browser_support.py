"""Shared by the console's browser tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
"""Screenshots of each state (git-ignored)."""

TIMEOUT_MS = 60_000
"""Generous: the browser shares a small, loaded machine with the server under test."""


def screenshot(page: Any, name: str) -> Path:
    """Save the page as ``test-artifacts/console/<name>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
