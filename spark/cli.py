"""``aviso-server spark publish`` and ``aviso-server spark history``: the data source without
Spark code.

pyspark is imported inside the commands only, so ``aviso-server serve`` (which loads this group)
never imports it. When a Spark session is already active in the process (a notebook, a
test) the commands use it and leave it running; otherwise they start one on ``--master``
and stop it at the end. On a local master (``local[...]``, ``local-cluster[...]``) the
executors' Python workers run this command's own interpreter unless ``PYSPARK_PYTHON`` says
otherwise, so ``/path/to/venv/bin/aviso-server spark ...`` works without activating the
virtualenv (PySpark would start the first ``python3`` on ``PATH``, which may not have aviso).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from aviso_spark.example_data import FORMATS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from aviso_plugins.types import Sink

# The last line of a Python traceback, as Spark embeds it in the exception it raises.
_PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Failed|Unavailable): ")

BACKEND_SINK = "backend"
HTTP_SINK = "http"
REACH_TIMEOUT_SECONDS = 3.0
"""How long the driver waits for the server before Spark starts (a refused connection
answers at once)."""


@click.group()
def spark() -> None:
    """Publish notifications from files, and read history back, with PySpark."""


def _echo_err(line: str) -> None:
    click.echo(line, err=True)


@contextmanager
def _session(master: str) -> Iterator[SparkSession]:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise click.ClickException(
            f"pyspark unavailable ({exc}); pip install 'aviso-py[spark]'"
        ) from exc
    from aviso_spark import register

    active = SparkSession.getActiveSession()
    if active is None:
        use_this_interpreter(master, os.environ)
    # Spark's console progress bar would interleave with our own progress lines on stderr.
    builder = SparkSession.builder.master(master).appName("aviso-server spark")
    session = active or builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    register(session)
    try:
        yield session
    finally:
        if active is None:
            session.stop()


def use_this_interpreter(master: str, environ: MutableMapping[str, str]) -> None:
    """Local masters run executors on this machine: give their Python workers this
    interpreter (a cluster's workers have their own, set by the cluster's configuration)."""
    if master.startswith("local") and not environ.get("PYSPARK_PYTHON"):
        environ["PYSPARK_PYTHON"] = sys.executable


def _pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        pairs[key] = value
    return pairs


def _read_input(session: SparkSession, path: str, file_format: str, stream: bool) -> DataFrame:
    # Every column as text, as a producer's CSV would give it: the field handlers
    # canonicalise values exactly as the server does for a JSON notify body.
    options = {"header": "true"} if file_format == "csv" else {}
    if not stream:
        frame = session.read.format(file_format).options(**options).load(path)
    else:
        # A streaming file source needs its schema up front: infer it from what is there now.
        sample = session.read.format(file_format).options(**options).load(path)
        frame = (
            session.readStream.format(file_format)
            .options(**options)
            .schema(sample.schema)
            .load(path)
        )
    return frame.select(*(frame[name].cast("string").alias(name) for name in frame.columns))


@spark.command()
@click.option("--input", "input_path", required=True, help="File or folder to publish.")
@click.option("--format", "file_format", type=click.Choice(FORMATS), required=True)
@click.option("--event-type", required=True)
@click.option("--deadletter", "deadletter_path", required=True, help="Dead-letter folder.")
@click.option("--config", "config_file", help="Configuration file read on the executors.")
@click.option(
    "--embedded-nats",
    "embedded_nats",
    type=click.Path(file_okay=False),
    help="With --sink backend: publish to the JetStream of the server started with "
    "'serve --embedded-nats' on this folder (its URL is read from the folder).",
)
@click.option("--sink", default="http", show_default=True, help="http, backend or a plugin sink.")
@click.option("--url", help="Server base URL (the http sink).")
@click.option("--authorization", help="Authorization header value (the http sink).")
@click.option("--sink-option", "sink_options", multiple=True, metavar="KEY=VALUE")
@click.option("--identifier-columns", help="field=column or column items, comma-separated.")
@click.option("--payload-columns", help="Columns making the payload object.")
@click.option("--payload-column", help="The column whose value is the payload.")
@click.option("--key-column", help="Column giving each row's message id.")
@click.option(
    "--fill-null",
    "fill_null",
    multiple=True,
    metavar="COLUMN=VALUE",
    help="The value a null in COLUMN stands for (else an identifier field's schema default).",
)
@click.option("--max-rejected-fraction", type=float, default=0.0, show_default=True)
@click.option("--batch-size", type=int, default=500, show_default=True)
@click.option(
    "--checkpoint",
    help="Publish as a streaming query with this checkpoint folder: only files not yet "
    "published are read (--input must be a folder).",
)
@click.option(
    "--follow",
    is_flag=True,
    help="With --checkpoint: keep watching the folder until Ctrl-C or SIGTERM, which stop "
    "the query and exit 0 with the summary.",
)
@click.option("--master", default="local[*]", show_default=True)
def publish(
    input_path: str,
    file_format: str,
    event_type: str,
    deadletter_path: str,
    config_file: str | None,
    embedded_nats: str | None,
    sink: str,
    url: str | None,
    authorization: str | None,
    sink_options: tuple[str, ...],
    identifier_columns: str | None,
    payload_columns: str | None,
    payload_column: str | None,
    key_column: str | None,
    fill_null: tuple[str, ...],
    max_rejected_fraction: float,
    batch_size: int,
    checkpoint: str | None,
    follow: bool,
    master: str,
) -> None:
    """Publish every row of INPUT as a notification; rejected rows go to --deadletter.

    The last line on stdout is the job's summary as JSON (also when the job fails):
    ``stored``, ``already_stored`` (held by the store from an earlier run), ``rejected``,
    ``retried``."""
    if follow and checkpoint is None:
        raise click.UsageError("--follow needs --checkpoint")
    if embedded_nats is not None:
        embedded_nats = os.path.abspath(embedded_nats)
    options = {
        "event_type": event_type,
        "deadletter_path": deadletter_path,
        "config": config_file,
        "embedded_nats": embedded_nats,
        "sink": sink,
        "sink.url": url,
        "sink.authorization": authorization,
        "identifier_columns": identifier_columns,
        "payload_columns": payload_columns,
        "payload_column": payload_column,
        "key_column": key_column,
        "max_rejected_fraction": str(max_rejected_fraction),
        "batch_size": str(batch_size),
        **{f"sink.{key}": value for key, value in _pairs(sink_options, "--sink-option").items()},
        **{f"fill_null.{key}": value for key, value in _pairs(fill_null, "--fill-null").items()},
    }
    given = {key: value for key, value in options.items() if value is not None}
    check_sink(
        config_file,
        sink,
        {key[len("sink.") :]: value for key, value in given.items() if key.startswith("sink.")},
        embedded_nats,
    )
    if checkpoint is None:
        # A summary left by an earlier run must not pass for this one's if it fails early.
        _forget_summary(deadletter_path)
    failure: click.ClickException | None = None
    with _session(master) as session:
        frame = _read_input(session, input_path, file_format, checkpoint is not None)
        try:
            if checkpoint is None:
                _publish_batch(session, frame, given)
            else:
                _publish_stream(frame, given, checkpoint, follow)
        except Exception as exc:  # Spark wraps the writer's error; show its first line
            failure = click.ClickException(_reason(exc))
    summary = _summary(deadletter_path, checkpoint is not None)
    if summary is not None:
        # How far a failed job got, as the last stdout line too (the error goes to stderr).
        click.echo(json.dumps(summary, sort_keys=True))
    if failure is not None:
        raise failure


def check_sink(
    config_file: str | None,
    sink: str,
    sink_options: dict[str, str],
    embedded_nats: str | None = None,
) -> None:
    """Find on the driver, before Spark starts, what would fail or lose every task: a
    configuration that does not load, options the sink refuses, a backend each executor
    would have a private copy of, a store the backend sink or a server the http sink
    cannot reach."""
    from aviso_host.embedding import ConfigError, PluginError
    from aviso_spark.runtime import host_runtime

    try:
        runtime = host_runtime(config_file, embedded_nats)
    except (ConfigError, PluginError) as exc:
        hint = "" if config_file else " (give --config FILE, the server's configuration)"
        raise click.ClickException(f"{exc}{hint}") from None
    try:
        built = runtime.sink(sink, sink_options)  # constructed only: nothing is connected
    except (ConfigError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    kind = runtime.settings.backend.kind
    backend = runtime.registry.backends.get(kind)
    if sink == BACKEND_SINK and backend is not None and not backend.shared_between_processes:
        raise click.ClickException(
            f"--sink backend cannot publish to the {kind!r} backend: each Spark worker "
            "would store the rows in its own process, where no server sees them; use "
            "--sink http --url URL, or a configuration whose backend is shared (jetstream)"
        )
    if sink == HTTP_SINK:
        _reach_server(sink_options["url"])
    if sink == BACKEND_SINK:
        _reach_store(built)


def _reach_store(sink: Sink) -> None:
    """Start and stop the backend sink once (its store connected, within its
    ``unavailable_after_seconds``): a store that is down fails the command at once."""
    import asyncio

    from aviso_plugins.types import SinkUnavailable

    async def reach() -> None:
        await sink.start()
        await sink.close()

    try:
        asyncio.run(reach())
    except (SinkUnavailable, ValueError) as exc:
        raise click.ClickException(f"cannot reach the store: {exc}") from None


def _reach_server(url: str) -> None:
    import httpx

    from aviso_host.embedding import mask_url_credentials

    try:
        httpx.get(url.rstrip("/") + "/health", timeout=REACH_TIMEOUT_SECONDS)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise click.ClickException(
            f"cannot reach the aviso server at {mask_url_credentials(url)} ({reason})"
        ) from None


def _publish_batch(session: SparkSession, frame: DataFrame, options: dict[str, str]) -> None:
    from aviso_spark.progress import StageProgress

    with StageProgress(session.sparkContext, _echo_err):
        frame.write.format("aviso").mode("append").options(**options).save()


def _publish_stream(
    frame: DataFrame, options: dict[str, str], checkpoint: str, follow: bool
) -> None:
    from aviso_spark.progress import report_batches

    writer = (
        frame.writeStream.format("aviso")
        .options(**options)
        .option("checkpointLocation", checkpoint)
    )
    query = (writer if follow else writer.trigger(availableNow=True)).start()
    # Ctrl-C and SIGTERM (a service manager's stop) end the query between batches: the
    # checkpoint holds exactly the committed ones and the command exits 0. The handler only
    # sets a flag: an exception raised inside a py4j call would break the connection to the
    # JVM, and the query could then not be stopped ("Answer from Java side is empty").
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, stop) for sig in stops}
    try:
        report_batches(query, _echo_err, stopping)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _forget_summary(deadletter_path: str) -> None:
    from pathlib import Path

    from aviso_spark import deadletter

    (Path(deadletter_path) / deadletter.SUMMARY_FILE).unlink(missing_ok=True)


def _summary(deadletter_path: str, streamed: bool) -> dict[str, Any] | None:
    """The batch job's summary, or the sum of this run's micro-batch summaries; ``None``
    when the job wrote none (it failed before Spark ran it)."""
    from aviso_spark import deadletter

    try:
        return (
            deadletter.combined_summary(deadletter_path)
            if streamed
            else deadletter.summary(deadletter_path)
        )
    except FileNotFoundError:
        return None


def _reason(exc: BaseException) -> str:
    """The Python error under Spark's wrapping: the last ``Type: message`` line of the
    worker's traceback (e.g. ``AvisoJobFailed: 12 of 40 rows rejected ...``)."""
    lines = (str(exc).strip() or type(exc).__name__).splitlines()
    raised = [line.strip() for line in lines if _PYTHON_ERROR.match(line)]
    return raised[-1] if raised else lines[0]


def rfc3339_utc(moment: datetime.datetime) -> str:
    """``2026-05-04T12:00:00.250000Z``: PySpark hands timestamps over as naive local times."""
    return moment.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


@spark.command()
@click.option("--url", required=True, help="Server base URL.")
@click.option("--event-type", required=True)
@click.option("--identifier", "identifier", multiple=True, metavar="FIELD=VALUE")
@click.option("--from-id", help="First sequence (inclusive); default: the oldest stored.")
@click.option("--from-date", help="First storage time (inclusive).")
@click.option("--to-id", help="Last sequence (inclusive); default: the last stored now.")
@click.option("--to-date", help="Last storage time (inclusive).")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    help="Spark tasks reading sequence ranges in parallel; default: Spark's parallelism.",
)
@click.option("--authorization", help="Authorization header value.")
@click.option("--output", help="Write here (a folder, as Spark does) instead of printing.")
@click.option(
    "--format", "file_format", type=click.Choice(FORMATS), default="json", show_default=True
)
@click.option("--master", default="local[*]", show_default=True)
def history(
    url: str,
    event_type: str,
    identifier: tuple[str, ...],
    from_id: str | None,
    from_date: str | None,
    to_id: str | None,
    to_date: str | None,
    partitions: int | None,
    authorization: str | None,
    output: str | None,
    file_format: str,
    master: str,
) -> None:
    """Read stored notifications through the replay API: print JSON lines or write --output."""
    from aviso_spark.progress import StageProgress
    from aviso_spark.rows import json_value

    options = {
        "url": url,
        "event_type": event_type,
        "from_id": from_id,
        "from_date": from_date,
        "to_id": to_id,
        "to_date": to_date,
        "numPartitions": None if partitions is None else str(partitions),
        "authorization": authorization,
        **{f"identifier.{key}": value for key, value in _pairs(identifier, "--identifier").items()},
    }
    with _session(master) as session:
        try:
            frame = (
                session.read.format("aviso")
                .options(**{key: value for key, value in options.items() if value is not None})
                .load()
            )
            with StageProgress(session.sparkContext, _echo_err):
                if output is not None:
                    frame.write.format(file_format).options(
                        **({"header": "true"} if file_format == "csv" else {})
                    ).save(output)
                else:
                    for row in frame.toLocalIterator():
                        record = row.asDict()
                        record["time"] = rfc3339_utc(record["time"])
                        # Typed columns: a date column's values as ISO text.
                        click.echo(json.dumps(json_value(record), sort_keys=True))
        except Exception as exc:
            raise click.ClickException(_reason(exc)) from exc
