"""The dead-letter folder: one JSON-lines file per partition, plus the job summary.

A partition's rejects are written to a temporary file renamed into place only when the
task succeeds, so a task retried by Spark leaves exactly one file for its partition. A
streaming query gives every micro-batch its own sub-folder (``batch-<id>``), each with the
same layout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from aviso_plugins.types import SinkRejected

SUMMARY_FILE = "_summary.json"
PART_GLOB = "part-*.jsonl"


def batch_folder(batch_id: int) -> str:
    """The sub-folder of one streaming micro-batch (zero-padded: listings sort by batch)."""
    return f"batch-{batch_id:08d}"


def clear(folder: Path) -> None:
    """Remove a previous batch job's output, so the folder holds exactly this job's rejects."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (*folder.glob(PART_GLOB), folder / SUMMARY_FILE):
        stale.unlink(missing_ok=True)


class DeadLetterFile:
    def __init__(self, folder: Path, partition: int, attempt: int) -> None:
        self.final = folder / f"part-{partition:05d}.jsonl"
        self.temporary = folder / f".part-{partition:05d}.attempt-{attempt}.tmp"
        self._handle: IO[str] | None = None

    def add(self, row: dict[str, Any], error: SinkRejected, message_id: str | None) -> None:
        if self._handle is None:
            self.temporary.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.temporary.open("w", encoding="utf-8")
        record = {
            "row": row,
            "code": error.code,
            "message": error.message,
            "message_id": message_id,
        }
        self._handle.write(json.dumps(record, sort_keys=True) + "\n")

    def commit(self) -> None:
        if self._handle is not None:
            self._handle.close()
            os.replace(self.temporary, self.final)

    def discard(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self.temporary.unlink(missing_ok=True)


def read(folder: Path) -> list[dict[str, Any]]:
    """Every dead-letter record of ``folder`` (tests, the CLI)."""
    records: list[dict[str, Any]] = []
    for part in sorted(folder.glob(PART_GLOB)):
        with part.open(encoding="utf-8") as handle:
            records += [json.loads(line) for line in handle]
    return records


def summary(folder: str | Path) -> dict[str, Any]:
    """The ``_summary.json`` a batch job (or one micro-batch) left in ``folder``."""
    loaded: dict[str, Any] = json.loads((Path(folder) / SUMMARY_FILE).read_text(encoding="utf-8"))
    return loaded


def combined_summary(folder: str | Path) -> dict[str, Any]:
    """Totals over every micro-batch summary of a streaming query's dead-letter folder."""
    batches = [
        summary(path.parent) for path in sorted(Path(folder).glob(f"batch-*/{SUMMARY_FILE}"))
    ]
    totals: dict[str, Any] = {"batches": len(batches)}
    for key in ("rows", "published", "rejected", "retried"):
        totals[key] = sum(batch.get(key, 0) for batch in batches)
    totals["status"] = "failed" if any(b["status"] != "succeeded" for b in batches) else "succeeded"
    return totals
