"""Import boundaries: the host never imports the load tests, and only the locust child
imports locust (which monkey-patches the whole process for gevent)."""

from __future__ import annotations

import subprocess
import sys

from aviso_loadtests.run import child_environment

CHECK = """
import sys
import aviso_host.cli
assert "aviso_loadtests" not in sys.modules, "aviso_host.cli imported aviso_loadtests"
import aviso_loadtests.cli, aviso_loadtests.report, aviso_loadtests.run, aviso_loadtests.sse
import aviso_loadtests.bare_streams, aviso_loadtests.baselines, aviso_loadtests.identifiers
leaked = sorted(name for name in ("gevent", "locust", "geventhttpclient") if name in sys.modules)
assert not leaked, leaked
"""


def test_only_the_locust_child_imports_locust() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
