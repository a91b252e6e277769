"""``aviso-server serve`` as a newcomer runs it: installed from a wheel (not this checkout),
started in an empty folder with an empty HOME."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.process import clean_environment, free_port, stop, wait_until_healthy
from tests.support.wheels import build_wheel, run, virtualenv_with

pytestmark = pytest.mark.install


@pytest.mark.timeout(600)
def test_an_installed_server_in_an_empty_folder_serves_the_packaged_example(
    tmp_path: Path,
) -> None:
    python = virtualenv_with(build_wheel(tmp_path / "build"), tmp_path / "venv")
    server = str(python.parent / "aviso-server")
    empty, home = tmp_path / "empty", tmp_path / "home"
    empty.mkdir()
    home.mkdir()
    env = clean_environment({"HOME": str(home)})
    env.pop("PYTHONPATH", None)  # the checkout must not leak in

    missing = subprocess.run(
        [server, "serve", "--config", "mine.yaml"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 1
    assert missing.stderr == (
        "Error: AVISOSERVER_CONFIG_FILE does not point to a file: mine.yaml "
        f"(looked for {empty / 'mine.yaml'})\n"
    )

    where = run([str(python), "-c", "import aviso_host; print(aviso_host.__file__)"], empty)
    # The typed plugin API says so to type checkers (PEP 561).
    marker = "import aviso_plugins, pathlib; print(pathlib.Path(aviso_plugins.__file__).parent)"
    plugin_api = Path(run([str(python), "-c", marker], empty).stdout.strip())
    assert plugin_api.is_relative_to(tmp_path / "venv")
    assert (plugin_api / "py.typed").is_file()
    # So is the host, for applications that embed it (aviso_host.embedding).
    assert (Path(where.stdout.strip()).parent / "py.typed").is_file()
    example = Path(where.stdout.strip()).parent / "config" / "example.yaml"
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [server, "serve", "--port", str(port)], cwd=empty, env=env, stderr=stderr
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, process)
        schema = httpx.get(f"{url}/api/v1/schema", timeout=10.0)
    finally:
        stop(process, 30.0)
    assert schema.status_code == 200
    assert "dissemination" in schema.json()["event_types"]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    (started,) = [r for r in records if r.get("event_name") == "service.started"]
    assert started["config_files"] == [str(example)]
    assert started["message"] == f"aviso service started (configuration: {example})"
    assert example.is_relative_to(tmp_path / "venv")
    assert list(empty.iterdir()) == []  # nothing written in the folder it was started in
