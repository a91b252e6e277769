"""``df.write.format("aviso")`` / ``df.writeStream.format("aviso")``: publish rows as
notifications through a sink plugin.

Write options (keys are case-insensitive):

- ``event_type`` (required): the event type of every row.
- ``identifier_columns``: ``field=column`` or ``column`` items, comma-separated; default:
  every column not used for the payload or the key.
- ``payload_columns`` (the payload is an object of these columns) or ``payload_column``
  (its value is the payload); neither means no payload.
- ``key_column``: the message id source; default a hash of the event type, the canonical
  identifier and the payload. Either way a re-run stores nothing twice while the
  notification is retained (the store checks a re-sent id against what it retains, not
  only its duplicate window); such rows count as ``already_stored``.
- ``fill_null.<column>``: the value a null in that column stands for. Otherwise a null in
  an identifier column takes its field's schema ``default``, and a row still missing a
  value is rejected (notify requires every schema field).
- ``config``: the aviso configuration file read on the executors (schemas, plugins,
  backend); default the server's own lookup.
- ``embedded_nats``: the data folder of a server started with ``serve --embedded-nats``:
  the ``backend`` sink publishes to that server's JetStream, at the URL it wrote there
  (also when ``config`` names the folder as ``embedded_store_dir``).
- ``sink``: ``http`` (default), ``backend`` or any installed sink plugin;
  ``sink.<name>`` options go to the sink (``sink.url``, ``sink.authorization``, …).
- ``deadletter_path`` (required): a folder (shared by every executor) receiving the
  rejected rows with their error code and message, and ``_summary.json`` (the counts
  ``stored``, ``already_stored``, ``rejected``, ``retried``; see ``aviso_spark.jobreport``,
  also for an aborted job); a streaming
  query writes one ``batch-<id>`` sub-folder of that shape per micro-batch, and a batch
  past ``max_rejected_fraction`` stops the query.
- ``max_rejected_fraction`` (default 0): the job fails when more rows are rejected.
- ``batch_size`` (default 500): rows validated and handed to the sink at once.
- ``fail_after_rows`` (tests only): the first attempt of partition 0 fails after
  publishing this many rows, to show that Spark's retry publishes nothing twice;
  ``fail_attempts`` (tests only, default 1): that many first attempts fail so.

Imported on its own by the Python worker in which Spark runs a job's ``commit`` or ``abort``
on the driver (to unpickle the writer): the host and its plugins are imported only by the
tasks that publish, so a job that fails is not kept waiting for imports it does not use.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from aviso_plugins.types import Notification, SinkRejected
from aviso_spark import deadletter, jobreport
from aviso_spark.rows import RowMapping, json_value

SINK_PREFIX = "sink."
FILL_NULL_PREFIX = "fill_null."
# Set by Spark on every task of a micro-batch (MicroBatchExecution.BATCH_ID_KEY).
BATCH_ID_PROPERTY = "streaming.sql.batchId"


class AvisoJobFailed(RuntimeError):
    """More rows were rejected than ``max_rejected_fraction`` allows."""


@dataclass(frozen=True)
class WriteOptions:
    mapping: RowMapping
    deadletter_path: str
    config: str | None = None
    embedded_nats: str | None = None
    sink: str = "http"
    sink_options: dict[str, str] = field(default_factory=dict)
    max_rejected_fraction: float = 0.0
    batch_size: int = 500
    fail_after_rows: int | None = None
    fail_attempts: int = 1

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> WriteOptions:
        """Check the options against the DataFrame's columns on the driver, before any task."""

        def required(key: str) -> str:
            value = options.get(key)
            if not value:
                raise ValueError(f"the aviso data source needs the option '{key}'")
            return value

        columns = set(schema.fieldNames())
        payload_columns = _names(options.get("payload_columns"))
        payload_column = options.get("payload_column") or None
        key_column = options.get("key_column") or None
        used = {*payload_columns, *([payload_column] if payload_column else [])}
        used |= {key_column} if key_column else set()
        if options.get("identifier_columns"):
            identifier = tuple(_pair(item) for item in _names(options["identifier_columns"]))
        else:
            identifier = tuple((name, name) for name in schema.fieldNames() if name not in used)
        fill_null = tuple(
            (key[len(FILL_NULL_PREFIX) :], value)
            for key, value in options.items()
            if key.lower().startswith(FILL_NULL_PREFIX)
        )
        used |= {column for column, _ in fill_null}
        missing = sorted((used | {column for _, column in identifier}) - columns)
        if missing:
            raise ValueError(f"columns not in the DataFrame: {', '.join(missing)}")
        fraction = float(options.get("max_rejected_fraction", "0"))
        if not 0 <= fraction <= 1:
            raise ValueError("max_rejected_fraction must be between 0 and 1")
        return cls(
            mapping=RowMapping(
                required("event_type"),
                identifier,
                payload_columns,
                payload_column,
                key_column,
                fill_null,
            ),
            deadletter_path=required("deadletter_path"),
            config=options.get("config") or None,
            embedded_nats=options.get("embedded_nats") or None,
            sink=options.get("sink", "http"),
            sink_options={
                key[len(SINK_PREFIX) :]: value
                for key, value in options.items()
                if key.lower().startswith(SINK_PREFIX)
            },
            max_rejected_fraction=fraction,
            batch_size=max(1, int(options.get("batch_size", "500"))),
            fail_after_rows=int(options["fail_after_rows"])
            if options.get("fail_after_rows")
            else None,
            fail_attempts=int(options.get("fail_attempts", "1")),
        )


def _pair(item: str) -> tuple[str, str]:
    """``field=column``, or ``column`` naming a field of the same name."""
    field_name, _, column = item.partition("=")
    return field_name.strip(), (column or field_name).strip()


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(item.strip() for item in (text or "").split(",") if item.strip())


@dataclass(frozen=True)
class PartitionResult(WriterCommitMessage):
    partition: int
    attempt: int
    counts: jobreport.Counts


class AvisoWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> PartitionResult:
        return write_partition(self.options, iterator, Path(self.options.deadletter_path))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        summarise(self.options, messages, Path(self.options.deadletter_path), "write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        write_abort_summary(Path(self.options.deadletter_path))


class AvisoStreamWriter(DataSourceStreamWriter):
    """One dead-letter sub-folder and one summary per micro-batch.

    Spark's checkpoint keeps a file source from reading a committed file again; a batch
    that was running when the query stopped is re-run with the same batch id after a
    restart, and its rows keep their message ids, so the store drops what it already has.
    """

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Row]) -> PartitionResult:
        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if batch is None:
            raise RuntimeError(f"no '{BATCH_ID_PROPERTY}' in a streaming write task")
        return write_partition(self.options, iterator, self._folder(int(batch)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        summarise(self.options, messages, self._folder(batchId), f"batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        write_abort_summary(self._folder(batchId))

    def _folder(self, batch: int) -> Path:
        return Path(self.options.deadletter_path) / deadletter.batch_folder(batch)


def write_partition(options: WriteOptions, rows: Iterator[Row], folder: Path) -> PartitionResult:
    """Publish one partition's rows; its rejects go to ``folder`` only if the task succeeds."""
    context = TaskContext.get()
    partition = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    dead = deadletter.DeadLetterFile(folder, partition, attempt)
    failing = partition == 0 and attempt < options.fail_attempts
    inject = options.fail_after_rows if failing else None
    counts = jobreport.Counts()

    def progress() -> None:
        jobreport.write_progress(folder, partition, attempt, counts)

    try:
        asyncio.run(_publish(options, rows, counts, progress, dead, inject))
    except BaseException:
        dead.discard()
        raise
    finally:
        progress()
    dead.commit()
    return PartitionResult(partition, attempt, counts)


async def _publish(
    options: WriteOptions,
    rows: Iterator[Row],
    counts: jobreport.Counts,
    progress: Callable[[], None],
    dead: deadletter.DeadLetterFile,
    fail_after_rows: int | None,
) -> None:
    """Publish ``rows`` batch by batch, keeping ``counts`` and recording them (``progress``)
    after each batch."""
    # Here, not at the top: see the module's docstring.
    from aviso_spark.runtime import host_runtime

    runtime = host_runtime(options.config, options.embedded_nats)
    mapping = options.mapping
    defaults = runtime.field_defaults(mapping.event_type)
    sink = runtime.sink(options.sink, options.sink_options)
    await sink.start()
    try:
        while chunk := list(itertools.islice(rows, options.batch_size)):
            accepted: list[tuple[Row, Notification]] = []
            for row in chunk:
                try:
                    accepted.append((row, mapping.notification(row, runtime.planner, defaults)))
                except SinkRejected as exc:
                    dead.add(json_value(row), exc, None)
                    counts.rejected += 1
            outcomes = await sink.publish_batch([item for _, item in accepted])
            for (row, item), outcome in zip(accepted, outcomes, strict=True):
                counts.retried += outcome.retries
                if outcome.error is not None:
                    dead.add(json_value(row), outcome.error, item.message_id)
                    counts.rejected += 1
                elif outcome.already_stored:
                    counts.already_stored += 1
                else:
                    counts.stored += 1
            progress()
            published = counts.stored + counts.already_stored
            if fail_after_rows is not None and published >= fail_after_rows:
                raise RuntimeError(f"injected failure after {published} published rows")
    finally:
        await sink.close()


def summarise(
    options: WriteOptions,
    messages: list[WriterCommitMessage | None],
    folder: Path,
    label: str,
) -> None:
    """Write ``_summary.json`` into ``folder``, log it, and fail past the threshold."""
    committed = {
        message.partition: message.attempt
        for message in messages
        if isinstance(message, PartitionResult)
    }
    counts = jobreport.job_counts(folder, committed)
    rejected = counts.rejected
    total = counts.report()["rows"]
    fraction = rejected / total if total else 0.0
    failed = fraction > options.max_rejected_fraction
    summary: dict[str, object] = {
        "status": "failed" if failed else "succeeded",
        **counts.report(),
        "rejected_fraction": fraction,
        "max_rejected_fraction": options.max_rejected_fraction,
        "deadletter_path": str(folder),
    }
    _write_summary(folder, summary, label)
    if failed:
        raise AvisoJobFailed(
            f"{rejected} of {total} rows rejected ({fraction:.2%}), more than "
            f"max_rejected_fraction {options.max_rejected_fraction:.2%}; see {folder}"
        )


def write_abort_summary(folder: Path) -> None:
    """The counts up to the failure, from every attempt's progress (failed ones too)."""
    # Spark also aborts after a failed commit: keep the summary that commit wrote.
    if not (folder / deadletter.SUMMARY_FILE).exists():
        report = jobreport.job_counts(folder).report()
        _write_summary(
            folder, {"status": "aborted", **report, "deadletter_path": str(folder)}, "abort"
        )


def _write_summary(folder: Path, summary: Mapping[str, object], label: str) -> None:
    text = json.dumps(summary, sort_keys=True)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / deadletter.SUMMARY_FILE).write_text(text + "\n", encoding="utf-8")
    # The commit runs in a Python worker of the driver: its stderr reaches the job's log.
    print(f"aviso-server spark {label}: {text}", file=sys.stderr)
