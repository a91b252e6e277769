"""What ``pip install aviso-py`` (no extras) costs: seconds, MiB and distributions.

  python -m benchmarks.install_footprint [--rounds 3] [--extras otlp] [LABEL=SOURCE ...]

Builds a wheel of each SOURCE (a source tree; default: this checkout, labelled ``here``),
then per round, alternating between sources, installs it into a fresh virtual environment
(no system packages, no pip cache, so every dependency comes from the package index) and
records the install's wall time, the size of the environment's site-packages, how many
distributions it holds and which of the optional heavy parts it got (grpcio, the
OpenTelemetry SDK, the nats-server binary, Swagger UI's files). Every round goes to
``benchmarks/results/install_footprint-*.json``. Needs the package index.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.results import spread, write_results

ROOT = Path(__file__).resolve().parents[1]
HEAVY_PARTS = {
    "grpcio": "grpc",
    "opentelemetry": "opentelemetry/sdk",
    "nats-server": "../../../bin/nats-server",
    "swagger-ui": "swagger_ui_bundle",
}
"""What is looked for, and where relative to site-packages."""


def build_wheel(source: Path, into: Path) -> Path:
    build = ("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(into), str(source))
    subprocess.run(
        [sys.executable, "-m", "pip", *build],
        check=True,
        capture_output=True,
    )
    [wheel] = into.glob("aviso_py-*.whl")
    return wheel


def install_round(wheel: Path, extras: str, folder: Path) -> dict[str, Any]:
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    pip = [str(folder / "bin" / "python"), "-m", "pip"]
    target = f"aviso-py[{extras}] @ {wheel.as_uri()}" if extras else str(wheel)
    started = time.perf_counter()
    subprocess.run(
        [*pip, "install", "-q", "--no-cache-dir", "--disable-pip-version-check", target],
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - started
    [site] = folder.glob("lib/python3*/site-packages")
    listed = subprocess.run(
        [*pip, "list", "--format=freeze", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    )
    size = sum(path.stat().st_size for path in site.rglob("*") if path.is_file())
    return {
        "install_s": seconds,
        "site_packages_mib": size / 2**20,
        "distributions": len(listed.stdout.split()),
        **{name: (site / where).exists() for name, where in HEAVY_PARTS.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--extras", default="", help="install aviso-py[EXTRAS] instead")
    parser.add_argument("sources", nargs="*", help="LABEL=SOURCE (default here=checkout)")
    arguments = parser.parse_args()
    sources = dict(item.split("=", 1) for item in arguments.sources) or {"here": str(ROOT)}
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        wheels = {
            label: build_wheel(Path(source), Path(scratch) / f"wheel-{label}")
            for label, source in sources.items()
        }
        for number in range(arguments.rounds):
            for label, wheel in wheels.items():
                folder = Path(scratch) / f"venv-{label}-{number}"
                figures = install_round(wheel, arguments.extras, folder)
                rounds.append({"source": label, "round": number, **figures})
                print(label, number, figures, flush=True)
    summary: dict[str, dict[str, dict[str, float]]] = {
        label: {
            measure: spread([float(r[measure]) for r in rounds if r["source"] == label])
            for measure in ("install_s", "site_packages_mib", "distributions")
        }
        for label in sources
    }
    path = write_results("install_footprint", rounds, {"extras": arguments.extras, **summary})
    print(f"rounds in {path}")
    for label, figures in summary.items():
        print(
            f"{label}: install {figures['install_s']['median']:.1f} s (median), "
            f"{figures['site_packages_mib']['median']:.0f} MiB, "
            f"{figures['distributions']['median']:.0f} distributions"
        )


if __name__ == "__main__":
    main()
