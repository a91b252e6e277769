"""Re-runs of a Spark write job past the store's duplicate window, the cost of the
idempotency index, and how soon a job fails once JetStream is down.

  python -m benchmarks.spark_rerun [--rows 4000] [--rounds 3] [--wait 5]

Starts its own nats-server (file storage) and an aviso server on it whose JetStream
duplicate window is 2 seconds, in place of the 2 minutes of the goal's setting, so that a
re-run ``--wait`` seconds after the first run (in place of 10 minutes) comes long after
the window ended, as the goal's does. Measures, ``--rounds`` rounds each:

(a) re-runs: each round writes ``--rows`` new rows with ``df.write.format("aviso")`` on
    ``local[2]`` (sink ``backend``, then ``http``), waits, and writes them again; the
    stream's last sequence tells how many rows were stored twice, and each summary's
    ``stored`` / ``already_stored`` is compared with the truth. A control round runs the
    same with ``idempotency_index: false`` (the window alone).
(b) the index's cost: keyed publishes (a fresh key each, the common case) straight into the
    JetStream and in-memory backends, index on and off in alternating rounds (ABBA), in
    notifications per second; and the in-memory index's memory per retained keyed record.
(c) a down JetStream: a ``backend``-sink job whose nats-server is stopped mid-job, the
    seconds from the stop to the job's failure, and where they went: to the first task
    attempt's end (its last progress file), to the abort's ``_summary.json``, and to
    ``save()`` raising. ``--outage-only`` measures (c) alone.

Writes every round with ``benchmarks.results.write_results`` and prints the summary as one
JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
import tracemalloc
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import nats
import yaml

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_builtins.backends.jetstream.backend import JetStreamBackend
from aviso_builtins.sinks.common import publish_all
from aviso_plugins.types import MESSAGE_ID_METADATA, BackendContext, SinkOutcome, StorageBackend
from aviso_spark.example_data import IDENTIFIER_COLUMNS, PAYLOAD_COLUMNS, dissemination_rows
from benchmarks.results import spread, write_results
from benchmarks.spark_sink import spark_session
from tests.support.nats import nats_server
from tests.support.server import running_server

ROOT = Path(__file__).resolve().parents[1]
EVENT_TYPE = "dissemination"
STREAM = "DISS"
WINDOW = "2s"
COLUMNS = ("row_id", *IDENTIFIER_COLUMNS, *PAYLOAD_COLUMNS)
PUBLISHES = 5_000
CONCURRENCY = 64
MEMORY_RECORDS = 50_000


def document(nats_url: str, index: bool = True) -> dict[str, Any]:
    shipped = yaml.safe_load((ROOT / "configuration" / "config.yaml").read_text())
    jetstream = {"nats_url": nats_url, "duplicate_window": WINDOW, "idempotency_index": index}
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "logging": {"level": "warn"},
        "notification_backend": {"kind": "jetstream", "jetstream": jetstream},
        "notification_schema": {EVENT_TYPE: shipped["notification_schema"][EVENT_TYPE]},
    }


async def last_sequence(nats_url: str) -> int:
    connection = await nats.connect(nats_url)
    try:
        return (await connection.jetstream().stream_info(STREAM)).state.last_seq
    finally:
        await connection.close()


def write(spark: Any, rows: list[dict[str, Any]], options: dict[str, str]) -> dict[str, Any]:
    texts = [{column: str(row[column]) for column in COLUMNS} for row in rows]
    frame = spark.createDataFrame(texts).repartition(2)
    frame.write.format("aviso").mode("append").options(
        event_type=EVENT_TYPE,
        identifier_columns=",".join(IDENTIFIER_COLUMNS),
        payload_columns=",".join(PAYLOAD_COLUMNS),
        **options,
    ).save()
    summary: dict[str, Any] = json.loads(
        (Path(options["deadletter_path"]) / "_summary.json").read_text()
    )
    return summary


def rerun_round(
    spark: Any, nats_url: str, options: dict[str, str], rows: int, wait: float, work: Path
) -> dict[str, Any]:
    prefix = f"b{uuid.uuid4().hex[:8]}"
    data = dissemination_rows(rows, 0.0, seed=rows, destination_prefix=prefix).rows
    started = time.perf_counter()
    first = write(spark, data, {**options, "deadletter_path": str(work / f"{prefix}-1")})
    first_seconds = time.perf_counter() - started
    after_first = asyncio.run(last_sequence(nats_url))
    time.sleep(wait)
    started = time.perf_counter()
    second = write(spark, data, {**options, "deadletter_path": str(work / f"{prefix}-2")})
    second_seconds = time.perf_counter() - started
    after_second = asyncio.run(last_sequence(nats_url))
    return {
        "rows": rows,
        "first": {key: first[key] for key in ("stored", "already_stored", "rejected")},
        "rerun": {key: second[key] for key in ("stored", "already_stored", "rejected")},
        "stored_twice": after_second - after_first,
        "summaries_exact": first["stored"] == rows
        and first["already_stored"] == 0
        and second["stored"] == after_second - after_first
        and second["stored"] + second["already_stored"] == rows,
        "first_seconds": first_seconds,
        "rerun_seconds": second_seconds,
    }


async def publish_rate(backend: StorageBackend, base: str) -> dict[str, float]:
    """Keyed publishes per second, a fresh key and topic each, ``CONCURRENCY`` in flight,
    and this process's CPU time per publish (steadier than the rate on a shared machine)."""
    await backend.start()
    try:
        messages = [
            (f"{base}.{index}", '{"n":1}', {MESSAGE_ID_METADATA: f"{base}-{index}"})
            for index in range(PUBLISHES)
        ]

        async def one(message: tuple[str, str, dict[str, str]]) -> SinkOutcome:
            await backend.publish(*message)
            return SinkOutcome()

        started, cpu = time.perf_counter(), time.process_time()
        await publish_all(messages, CONCURRENCY, one)
        return {
            "rate": PUBLISHES / (time.perf_counter() - started),
            "cpu_us": (time.process_time() - cpu) / PUBLISHES * 1e6,
        }
    finally:
        await backend.shutdown()


def index_cost(nats_url: str, rounds: int) -> list[dict[str, Any]]:
    measured = []
    for round_number in range(rounds):
        # ABBA: on, off, off, on, ... so that both see the same drift of the machine's load.
        order = (True, False) if round_number % 2 == 0 else (False, True)
        for index in order:
            base = f"idx{uuid.uuid4().hex[:8]}"
            options = {"nats_url": nats_url, "idempotency_index": index}
            jetstream = asyncio.run(
                publish_rate(JetStreamBackend(BackendContext(options, {})), base)
            )
            in_memory = asyncio.run(
                publish_rate(
                    InMemoryBackend(
                        BackendContext({"idempotency_index": index, "max_topics": PUBLISHES}, {})
                    ),
                    base,
                )
            )
            measured.append(
                {
                    "round": round_number,
                    "index": index,
                    "jetstream": jetstream,
                    "in_memory": in_memory,
                }
            )
    return measured


def index_memory() -> dict[str, float]:
    """Bytes per retained keyed record that the in-memory index adds (tracemalloc)."""

    async def fill(index: bool) -> int:
        backend = InMemoryBackend(
            BackendContext({"idempotency_index": index, "max_topics": MEMORY_RECORDS}, {})
        )
        await backend.start()
        tracemalloc.start()
        for number in range(MEMORY_RECORDS):
            key = f"k{number:08d}"
            await backend.publish(f"mem.{number}", "null", {MESSAGE_ID_METADATA: key})
        size, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        await backend.shutdown()
        return size

    with_index = asyncio.run(fill(True))
    without = asyncio.run(fill(False))
    return {
        "records": MEMORY_RECORDS,
        "bytes_with_index": with_index,
        "bytes_without_index": without,
        "bytes_per_record": (with_index - without) / MEMORY_RECORDS,
    }


def outage_round(spark: Any, work: Path, rows: int) -> dict[str, Any]:
    """Seconds from stopping the nats-server mid-job to the job's failure."""
    with nats_server(work / f"nats-{uuid.uuid4().hex[:6]}") as nats_down:
        config = work / f"outage-{uuid.uuid4().hex[:6]}.yaml"
        config.write_text(yaml.safe_dump(document(nats_down.url)))
        data = dissemination_rows(rows, 0.0, seed=7, destination_prefix="out").rows
        outcome: dict[str, Any] = {}
        dead = work / f"outage-{uuid.uuid4().hex[:6]}"

        def job() -> None:
            try:
                write(
                    spark,
                    data,
                    {
                        "config": str(config),
                        "sink": "backend",
                        "deadletter_path": str(dead),
                        "batch_size": "100",
                    },
                )
                outcome["failed"] = False
            except Exception as exc:
                outcome["failed"] = True
                outcome["reason"] = str(exc).strip().splitlines()[-1][:300]
            outcome["ended"] = time.perf_counter()

        thread = threading.Thread(target=job)
        thread.start()
        # Stop it once rows are being stored (the job is under way).
        while asyncio.run(_stored_or_zero(nats_down.url)) < 200 and thread.is_alive():
            time.sleep(0.2)
        stopped = time.perf_counter()
        stopped_at = time.time()
        nats_down.stop()
        thread.join(300)
    # File times (the wall clock) say when each step ended.
    progress = sorted(path.stat().st_mtime for path in (dead / "_progress").glob("part-*"))
    summary = dead / "_summary.json"
    return {
        "failed": outcome.get("failed"),
        "seconds_to_fail": outcome["ended"] - stopped,
        "first_task_ended_after": progress[0] - stopped_at if progress else None,
        "last_task_ended_after": progress[-1] - stopped_at if progress else None,
        "summary_written_after": summary.stat().st_mtime - stopped_at if summary.exists() else None,
        "reason": outcome.get("reason", ""),
    }


async def _stored_or_zero(nats_url: str) -> int:
    try:
        return await last_sequence(nats_url)
    except Exception:
        return 0


def reruns_and_index(
    spark: Any, work: Path, arguments: argparse.Namespace, rounds: list[dict[str, Any]]
) -> dict[str, Any]:
    """Parts (a) and (b): their rounds appended to ``rounds``, their summary returned."""
    with nats_server(work / "nats") as nats_up:
        config = work / "aviso.yaml"
        config.write_text(yaml.safe_dump(document(nats_up.url)))
        control = work / "aviso-window-only.yaml"
        control.write_text(yaml.safe_dump(document(nats_up.url, index=False)))
        with running_server(document(nats_up.url)) as server:
            for number in range(arguments.rounds):
                for sink in ("backend", "http"):
                    options = {"config": str(config), "sink": sink, "sink.url": server.url}
                    measured = rerun_round(
                        spark, nats_up.url, options, arguments.rows, arguments.wait, work
                    )
                    rounds.append({"part": "rerun", "sink": sink, "round": number, **measured})
                    print(json.dumps(rounds[-1]), flush=True)
        for number in range(arguments.rounds):
            options = {"config": str(control), "sink": "backend"}
            measured = rerun_round(
                spark, nats_up.url, options, arguments.rows, arguments.wait, work
            )
            rounds.append({"part": "control", "sink": "backend", "round": number, **measured})
            print(json.dumps(rounds[-1]), flush=True)
        for entry in index_cost(nats_up.url, max(arguments.rounds, 4)):
            rounds.append({"part": "index_cost", **entry})
            print(json.dumps(rounds[-1]), flush=True)

    def of(part: str, **match: Any) -> list[dict[str, Any]]:
        return [
            entry
            for entry in rounds
            if entry["part"] == part and all(entry.get(k) == v for k, v in match.items())
        ]

    summary: dict[str, Any] = {"memory": index_memory()}
    for sink in ("backend", "http"):
        entries = of("rerun", sink=sink)
        summary[f"rerun_{sink}"] = {
            "stored_twice": sum(entry["stored_twice"] for entry in entries),
            "summaries_exact": all(entry["summaries_exact"] for entry in entries),
            "rerun_seconds": spread([entry["rerun_seconds"] for entry in entries]),
        }
    summary["control_window_only"] = {
        "stored_twice": [entry["stored_twice"] for entry in of("control")],
    }
    for backend in ("jetstream", "in_memory"):
        figures: dict[str, Any] = {}
        for measure in ("rate", "cpu_us"):
            on = [entry[backend][measure] for entry in of("index_cost", index=True)]
            off = [entry[backend][measure] for entry in of("index_cost", index=False)]
            figures[measure] = {
                "with_index": spread(on),
                "without_index": spread(off),
                "ratio": spread(on)["median"] / spread(off)["median"],
            }
        summary[f"index_cost_{backend}"] = figures
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wait", type=float, default=5.0)
    parser.add_argument("--outage-only", action="store_true", help="(c) alone")
    arguments = parser.parse_args()

    spark = spark_session("aviso-spark-rerun-benchmark")
    rounds: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"load_average": os.getloadavg()}
    with TemporaryDirectory() as folder:
        work = Path(folder)
        if not arguments.outage_only:
            summary.update(reruns_and_index(spark, work, arguments, rounds))
        for number in range(arguments.rounds):
            rounds.append({"part": "outage", "round": number, **outage_round(spark, work, 40_000)})
            print(json.dumps(rounds[-1]), flush=True)
    spark.stop()
    outages = [entry for entry in rounds if entry["part"] == "outage"]
    for key in ("seconds_to_fail", "first_task_ended_after", "summary_written_after"):
        values = [entry[key] for entry in outages if entry[key] is not None]
        summary[f"outage_{key}"] = spread(values) if values else None
    path = write_results("spark_rerun", rounds, summary)
    print(json.dumps({"results": str(path), **summary}))


if __name__ == "__main__":
    main()
