"""A realistic dissemination-style dataset with a chosen fraction of invalid rows.

Each row describes one product delivered to a destination (the ``dissemination`` schema of
``configuration/config.yaml``). Invalid rows break one field handler rule each, so they are
rejected with ``INVALID_NOTIFICATION_REQUEST`` both by Spark and by the server.

    python -m aviso_spark.example_data rows.jsonl --rows 20000 --invalid-fraction 0.01
"""

from __future__ import annotations

import argparse
import csv
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IDENTIFIER_COLUMNS = (
    "destination",
    "target",
    "class",
    "expver",
    "domain",
    "date",
    "time",
    "stream",
    "step",
)
PAYLOAD_COLUMNS = ("path", "size")
COLUMNS = ("row_id", *IDENTIFIER_COLUMNS, *PAYLOAD_COLUMNS)
FORMATS = ("csv", "json", "parquet")
"""What ``write`` writes, and what ``aviso-server spark publish`` reads."""

# One broken rule per invalid row: (column, value) pairs each handler refuses.
_BREAKAGES = (
    ("class", "odx"),  # StringHandler max_length 2
    ("domain", "7"),  # EnumHandler a..z
    ("date", "2026-02-30"),  # DateHandler: no such day
    ("step", -6),  # IntHandler range [0, 100000]
)


@dataclass(frozen=True)
class ExampleData:
    rows: list[dict[str, Any]]
    invalid_ids: frozenset[int]
    """``row_id`` of every row built to be rejected."""


def dissemination_rows(
    count: int, invalid_fraction: float, seed: int = 0, destination_prefix: str = "ecpds"
) -> ExampleData:
    """``count`` rows with distinct identifiers (step is unique per row); exactly
    ``round(count * invalid_fraction)`` of them invalid, at seeded random positions."""
    chooser = random.Random(seed)
    invalid = frozenset(chooser.sample(range(count), round(count * invalid_fraction)))
    rows = []
    for row_id in range(count):
        day = 1 + row_id % 28
        hour = (0, 6, 12, 18)[row_id % 4]
        stream = ("oper", "enfo", "wave")[row_id % 3]
        row: dict[str, Any] = {
            "row_id": row_id,
            "destination": f"{destination_prefix}{row_id % 5}",
            "target": f"t{row_id % 3}",
            "class": "od",
            "expver": "1",
            "domain": "g",
            "date": f"2026-04-{day:02d}",
            "time": f"{hour:02d}",
            "stream": stream,
            "step": row_id,
            "path": f"/dissemination/{stream}/202604{day:02d}/{hour:02d}/{row_id}.grib",
            "size": 1_000_000 + chooser.randrange(50_000_000),
        }
        if row_id in invalid:
            column, value = _BREAKAGES[row_id % len(_BREAKAGES)]
            row[column] = value
        rows.append(row)
    return ExampleData(rows, invalid)


def write(rows: list[dict[str, Any]], path: Path, file_format: str) -> None:
    """``csv`` (with a header), ``json`` (JSON lines, what Spark's json reader expects) or
    ``parquet`` (one file, typed columns; needs pyarrow, part of the ``spark`` extra)."""
    if file_format == "parquet":
        import pyarrow
        import pyarrow.parquet

        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
        return
    if file_format not in FORMATS:
        raise ValueError(f"unsupported format '{file_format}' (csv, json or parquet)")
    with path.open("w", encoding="utf-8", newline="") as handle:
        if file_format == "csv":
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        else:
            handle.writelines(json.dumps(row) + "\n" for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--invalid-fraction", type=float, default=0.01)
    parser.add_argument("--format", choices=FORMATS, default="json")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    data = dissemination_rows(arguments.rows, arguments.invalid_fraction, arguments.seed)
    write(data.rows, arguments.path, arguments.format)


if __name__ == "__main__":
    main()
