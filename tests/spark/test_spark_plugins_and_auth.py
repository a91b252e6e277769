"""Spark with the rest of the plugin world: a third-party field handler validating rows on
the executors, and the ``http`` sink / the reader passing credentials to a server with
authentication enabled.
"""

from __future__ import annotations

import copy
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from aviso_spark import deadletter, register
from aviso_spark.example_data import IDENTIFIER_COLUMNS, dissemination_rows
from tests.spark.checks import EVENT_TYPE
from tests.spark.conftest import ROOT, dissemination_document
from tests.support.nats import NatsServer
from tests.support.process import install_into
from tests.support.server import RunningServer, running_server
from tests.support.tokens import SECRET, mint

COLOUR_PLUGIN = ROOT / "tests" / "fixtures" / "aviso_colour_handler"
PAINT = {
    "payload": {"required": False},
    "topic": {"base": "paint", "key_order": ["colour", "line"]},
    "identifier": {
        "colour": {"type": "ColourHandler", "required": True},
        "line": {"type": "IntHandler", "required": False},
    },
}


def save(document: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_field_handler_installed_as_a_plugin_validates_rows_on_the_executors(
    spark: SparkSession, nats_session: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Installed by pip as a third party would, then shipped to the executors the Spark way
    # (--py-files): its entry point is found in the zip by the workers' plugin discovery.
    site = tmp_path / "site"
    install_into(site, COLOUR_PLUGIN)
    spark.sparkContext.addPyFile(shutil.make_archive(str(tmp_path / "plugins"), "zip", site))
    register(spark)  # the data source's tasks get the Python files known when it is registered
    monkeypatch.syspath_prepend(str(site))  # the server in this process has it too
    document = dissemination_document(nats_session.url)
    document["notification_schema"] = {"paint_batch": PAINT}
    config = save(document, tmp_path / "aviso.yaml")
    rows = [("#A1B", "1"), ("#a1b2c3", "2"), ("crimson", "3"), ("#ABCDEF", "4"), ("#12", "5")]

    with running_server(document) as server:
        (
            spark.createDataFrame(rows, "colour string, line string")
            .repartition(2)
            .write.format("aviso")
            .mode("append")
            .option("event_type", "paint_batch")
            .option("config", str(config))
            .option("sink", "backend")
            .option("deadletter_path", str(tmp_path / "dead"))
            .option("max_rejected_fraction", "0.5")
            .save()
        )
        history = (
            spark.read.format("aviso")
            .options(url=server.url, event_type="paint_batch", from_id="1")
            .option("identifier.colour", "#AA11BB")
            .load()
            .collect()
        )

    assert deadletter.summary(tmp_path / "dead")["published"] == 3
    dead = deadletter.read(tmp_path / "dead")
    assert sorted(record["row"]["colour"] for record in dead) == ["#12", "crimson"]
    assert all("must be a colour like '#a1b2c3'" in record["message"] for record in dead)
    # Canonicalised by the plugin on the executor exactly as the server does it.
    assert [(row["colour"], row["line"]) for row in history] == [("#aa11bb", 1)]


@pytest.fixture
def protected(nats_session: NatsServer, tmp_path: Path) -> Iterator[tuple[RunningServer, Path]]:
    """The dissemination stream behind trusted-proxy auth: producers write, readers read."""
    document = copy.deepcopy(dissemination_document(nats_session.url))
    document["auth"] = {
        "enabled": True,
        "mode": "trusted_proxy",
        "jwt_secret": SECRET,
        "admin_roles": {"localrealm": ["admin"]},
    }
    document["notification_schema"][EVENT_TYPE]["auth"] = {
        "required": True,
        "write_roles": {"localrealm": ["producer"]},
        "read_roles": {"localrealm": ["reader"]},
    }
    with running_server(document) as server:
        yield server, save(document, tmp_path / "aviso.yaml")


def test_the_http_sink_and_the_reader_pass_credentials(
    spark: SparkSession, protected: tuple[RunningServer, Path], tmp_path: Path
) -> None:
    server, config = protected
    prefix = f"a{uuid.uuid4().hex[:8]}"
    data = dissemination_rows(30, 0.0, seed=31, destination_prefix=prefix)
    df = spark.createDataFrame([{k: str(v) for k, v in row.items()} for row in data.rows])

    def publish(dead: Path, **credentials: str) -> dict[str, Any]:
        writer = (
            df.write.format("aviso")
            .mode("append")
            .option("event_type", EVENT_TYPE)
            .option("config", str(config))
            .option("identifier_columns", ",".join(IDENTIFIER_COLUMNS))
            .option("payload_columns", "path,size")
            .option("deadletter_path", str(dead))
            .option("max_rejected_fraction", "1")
            .option("sink", "http")
            .option("sink.url", server.url)
        )
        writer.options(**credentials).save()
        return deadletter.summary(dead)

    anonymous = publish(tmp_path / "anonymous")
    assert anonymous["published"] == 0 and anonymous["rejected"] == 30
    assert {record["code"] for record in deadletter.read(tmp_path / "anonymous")} == {
        "UNAUTHORIZED"
    }

    producer = f"Bearer {mint('producer-user', roles=['producer'])}"
    assert publish(tmp_path / "producer", **{"sink.authorization": producer})["published"] == 30

    history = spark.read.format("aviso").options(
        url=server.url, event_type=EVENT_TYPE, **{"identifier.destination": f"{prefix}0"}
    )
    history = history.option("identifier.class", "od")
    with pytest.raises(Exception, match="HTTP 401"):
        history.load().collect()
    reader = f"Bearer {mint('reader-user', roles=['reader'])}"
    rows = history.option("authorization", reader).load().collect()
    assert sorted(int(row["step"]) for row in rows) == list(range(0, 30, 5))
