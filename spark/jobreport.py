"""A write job's counts: what each task attempt reported as it went, and the job's summary.

Every task attempt writes its running counts to ``_progress/`` in the dead-letter folder
after each batch of rows, replacing the file whole. The summary is made from them on the
driver, so a job that Spark aborts (a store down, a task out of attempts) still says how
far it got, and a partition that needed several attempts counts each row once:

- ``stored``: rows the store took as new, summed over every attempt (a row an earlier
  attempt stored is ``already_stored`` for the next one, not stored again);
- ``already_stored``: rows whose notification the store already held under their message
  id (an earlier run's), taken from the final attempt less what earlier attempts of this
  job stored;
- ``rejected``: the final attempt's rejected rows (a failed attempt's dead letters are
  discarded, and its retry rejects the same rows again);
- ``retried``: re-sends after transient failures, over every attempt.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

PROGRESS_FOLDER = "_progress"
_PROGRESS_NAME = re.compile(r"part-(\d+)\.attempt-(\d+)\.json")
COUNT_KEYS = ("stored", "already_stored", "rejected", "retried")


@dataclass
class Counts:
    stored: int = 0
    already_stored: int = 0
    rejected: int = 0
    retried: int = 0

    def add(self, other: Counts) -> None:
        for name in COUNT_KEYS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def report(self) -> dict[str, int]:
        """The counts as the summary gives them, with ``rows`` (all rows seen) and
        ``published`` (rows the store holds: ``stored`` plus ``already_stored``)."""
        published = self.stored + self.already_stored
        return {**asdict(self), "rows": published + self.rejected, "published": published}


def write_progress(folder: Path, partition: int, attempt: int, counts: Counts) -> None:
    """Record one attempt's counts so far (replaced whole: a reader never sees half)."""
    progress = folder / PROGRESS_FOLDER
    progress.mkdir(parents=True, exist_ok=True)
    name = f"part-{partition:05d}.attempt-{attempt}.json"
    temporary = progress / f".{name}.tmp"
    temporary.write_text(json.dumps(asdict(counts)), encoding="utf-8")
    os.replace(temporary, progress / name)


def clear_progress(folder: Path) -> None:
    for stale in (folder / PROGRESS_FOLDER).glob("*"):
        stale.unlink(missing_ok=True)


def _attempts(folder: Path) -> dict[int, dict[int, Counts]]:
    """partition -> attempt -> its last recorded counts."""
    found: dict[int, dict[int, Counts]] = defaultdict(dict)
    for path in (folder / PROGRESS_FOLDER).glob("part-*.json"):
        match = _PROGRESS_NAME.fullmatch(path.name)
        if match is None:
            continue
        recorded = json.loads(path.read_text(encoding="utf-8"))
        counts = Counts(**{key.name: int(recorded.get(key.name, 0)) for key in fields(Counts)})
        found[int(match[1])][int(match[2])] = counts
    return found


def job_counts(folder: Path, committed: Mapping[int, int] | None = None) -> Counts:
    """The job's counts from every attempt's progress in ``folder``.

    ``committed`` maps a partition to the attempt Spark committed for it; any other
    partition's final attempt is its latest one (an aborted job's failed attempt)."""
    committed = committed or {}
    total = Counts()
    for partition, attempts in _attempts(folder).items():
        final = committed.get(partition, max(attempts))
        last = attempts.get(final, Counts())
        earlier = sum(counts.stored for attempt, counts in attempts.items() if attempt != final)
        total.add(
            Counts(
                stored=last.stored + earlier,
                already_stored=max(0, last.already_stored - earlier),
                rejected=last.rejected,
                retried=sum(counts.retried for counts in attempts.values()),
            )
        )
    return total


def sum_reports(reports: Iterable[Mapping[str, object]]) -> dict[str, int]:
    """Totals of several summaries' counts (a streaming query's micro-batches)."""
    totals = dict.fromkeys((*COUNT_KEYS, "rows", "published"), 0)
    for report in reports:
        for key in totals:
            value = report.get(key, 0)
            totals[key] += value if isinstance(value, int) else 0
    return totals
