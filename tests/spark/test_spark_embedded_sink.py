"""``aviso-server spark publish --sink backend`` meets the JetStream of ``aviso-server serve
--embedded-nats DIR``: the server writes its nats-server's URL into DIR, the job reads it
there, and a store that is down fails the command at once, in one line."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from aviso_builtins.backends.jetstream.embedded import URL_FILE
from aviso_spark.example_data import dissemination_rows, write
from tests.host.backends.jetstream_support import aviso_serving, write_config
from tests.spark.conftest import AvisoSetup, dissemination_document
from tests.spark.test_spark_cli import publish_args, run_cli
from tests.spark.test_spark_rerun import replayed_identifiers
from tests.support.process import free_port


def test_the_backend_sink_publishes_to_the_embedded_nats_of_a_running_server(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    document = dissemination_document(f"nats://127.0.0.1:{free_port()}")  # not used
    config = write_config(tmp_path, document)
    prefix = "emb"
    data = dissemination_rows(40, 0.0, seed=31, destination_prefix=prefix)
    for row in data.rows:
        row["destination"] = prefix
    write(data.rows, tmp_path / "rows.csv", "csv")
    args = ["--embedded-nats", str(store)]

    with aviso_serving(tmp_path, config, "--embedded-nats", str(store)) as server:
        url = (store / URL_FILE).read_text().strip()
        assert url.startswith("nats://127.0.0.1:")
        setup = AvisoSetup(server, config, prefix)  # type: ignore[arg-type]
        published = run_cli(
            *publish_args(setup, tmp_path / "rows.csv", "csv", tmp_path / "d"), *args
        )
        assert published.exit_code == 0, published.output
        summary = json.loads(published.stdout.splitlines()[-1])
        assert (summary["stored"], summary["already_stored"], summary["status"]) == (
            40,
            0,
            "succeeded",
        )
        assert len(replayed_identifiers(setup, prefix)) == 40
        server.kill()  # kill -9: its nats-server goes with it, the URL file stays behind

    failed = run_cli(*publish_args(setup, tmp_path / "rows.csv", "csv", tmp_path / "d2"), *args)
    assert failed.exit_code == 1, failed.output
    [line] = failed.stderr.splitlines()
    assert line.startswith("Error: cannot reach the store: the jetstream backend did not start"), (
        line
    )
    assert not (tmp_path / "d2").exists()  # Spark never ran the job
