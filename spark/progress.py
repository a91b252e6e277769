"""Progress lines for the CLI: one per finished Spark stage, or per streaming micro-batch.

Stages are found by polling ``SparkContext.statusTracker()`` from a thread (no JVM
listener to register); the jobs are tagged with a job group so that other work in the
same session is not reported.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql.streaming.query import StreamingQuery

POLL_SECONDS = 0.25
JOB_GROUP_PROPERTY = "spark.jobGroup.id"


class StageProgress:
    """While active, ``echo`` one line per finished stage of the jobs started meanwhile."""

    def __init__(self, context: SparkContext, echo: Callable[[str], None]) -> None:
        self.context = context
        self.echo = echo
        self.group = f"aviso-spark-{uuid.uuid4().hex[:8]}"
        self._reported: set[int] = set()
        self._previous_group: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aviso-spark-progress", daemon=True)

    def __enter__(self) -> StageProgress:
        # The job group is a thread-local property: set it on the thread starting the jobs.
        self._previous_group = self.context.getLocalProperty(JOB_GROUP_PROPERTY)
        self.context.setJobGroup(self.group, "aviso-server spark", interruptOnCancel=False)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()  # stages that finished since the last poll
        # None removes the property (the JVM gets null): the thread's group is as before.
        self.context.setLocalProperty(JOB_GROUP_PROPERTY, self._previous_group)  # type: ignore[arg-type]

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._poll()

    def _poll(self) -> None:
        tracker = self.context.statusTracker()
        active = set(tracker.getActiveStageIds())
        for job_id in sorted(tracker.getJobIdsForGroup(self.group)):
            job = tracker.getJobInfo(job_id)
            for stage_id in sorted(job.stageIds) if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is None or stage_id in self._reported or stage_id in active:
                    continue
                if stage.numTasks and stage.numCompletedTasks >= stage.numTasks:
                    self._reported.add(stage_id)
                    self.echo(
                        f"stage {stage_id} finished: {stage.numCompletedTasks}/{stage.numTasks} "
                        f"tasks, {stage.numFailedTasks} failed ({stage.name})"
                    )


def report_batches(
    query: StreamingQuery, echo: Callable[[str], None], stopping: threading.Event
) -> None:
    """Wait for ``query`` to end, ``echo``-ing one line per finished micro-batch; stop it
    once ``stopping`` is set (checked between waits)."""
    reported = -1

    def report() -> None:
        nonlocal reported
        for progress in query.recentProgress:
            if progress.batchId > reported:
                reported = progress.batchId
                echo(f"batch {progress.batchId} finished: {progress.numInputRows} input rows")

    # pyspark takes fractions of a second (it waits int(timeout * 1000) ms); its annotation
    # says int.
    while not query.awaitTermination(POLL_SECONDS):  # type: ignore[arg-type]
        report()
        if stopping.is_set():
            query.stop()
            break
    report()
