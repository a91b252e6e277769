"""Names, comments and docs stand on their own: nothing points at issue numbers, spec chapters
or checklists that a reader of this repository cannot open."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".html", ".js"}
OUTSIDE_REFERENCES = re.compile(
    r"\bissues? ?#\d|\bissue \d|§|current-upstream|shared/spec|\bchecklist\b|\bspec chapter"
    r"|\b\w+ chapter §|\btest_item_\d",
    re.IGNORECASE,
)


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    )
    names = [name for name in listed.stdout.decode().split("\0") if name]
    return [ROOT / name for name in names if Path(name).suffix in SUFFIXES]


def test_no_reference_points_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in tracked_text_files()
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE_REFERENCES.search(line)
    ]
    assert not found, "\n".join(found)
