"""One local Spark session for every Spark test, plus an aviso server on a real nats-server."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.nats import NatsServer, nats_server
from tests.support.server import RunningServer, running_server

pyspark = pytest.importorskip("pyspark", reason="the 'spark' extra is not installed")

from pyspark.sql import SparkSession  # noqa: E402  (after the skip above)

from aviso_spark import register  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """``local[2,2]``: two cores, and a failed task is retried once (as on a cluster)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("aviso-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    register(session)
    yield session
    session.stop()


def dissemination_document(nats_url: str) -> dict[str, Any]:
    """The shipped dissemination schema on JetStream, with replay tuned for big checks."""
    shipped = yaml.safe_load((ROOT / "configuration" / "config.yaml").read_text())
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "jetstream", "jetstream": {"nats_url": nats_url}},
        "watch_endpoint": {
            "replay_batch_size": 1000,
            "replay_batch_delay_ms": 0,
            "max_historical_notifications": 100_000,
            "sse_heartbeat_interval_sec": 1,  # a test's watch thread sees its stop request
        },
        "notification_schema": {"dissemination": shipped["notification_schema"]["dissemination"]},
    }


@dataclass
class AvisoSetup:
    server: RunningServer
    config_file: Path
    prefix: str
    """Destination prefix unique to one test: the shared JetStream streams persist."""


@pytest.fixture
def aviso(nats_session: NatsServer, tmp_path: Path) -> Iterator[AvisoSetup]:
    document = dissemination_document(nats_session.url)
    config_file = tmp_path / "aviso.yaml"
    config_file.write_text(yaml.safe_dump(document))
    with running_server(document) as server:
        yield AvisoSetup(server, config_file, f"d{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def short_window(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AvisoSetup]:
    """A server on a nats-server of its own whose streams forget ids after one second."""
    folder = tmp_path_factory.mktemp("short-window")
    with nats_server(folder / "nats") as nats:
        document = dissemination_document(nats.url)
        document["notification_backend"]["jetstream"]["duplicate_window"] = "1s"
        config_file = folder / "aviso.yaml"
        config_file.write_text(yaml.safe_dump(document))
        with running_server(document) as server:
            yield AvisoSetup(server, config_file, "")


@pytest.fixture
def aviso_short(short_window: AvisoSetup) -> AvisoSetup:
    """A destination prefix of the test's own on the short-window server."""
    return AvisoSetup(short_window.server, short_window.config_file, f"r{uuid.uuid4().hex[:8]}")
