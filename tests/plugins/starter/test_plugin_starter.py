"""``aviso-server plugin new``: a package per plugin kind that is ruff clean, installs into a
fresh virtualenv (aviso-py from a wheel built from this checkout) and passes its own tests,
as generated."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from aviso_builtins.starter import plugin_tools
from aviso_builtins.starter.package import KINDS, StarterError, create_package, names_for
from aviso_host.cli import main
from aviso_host.plugins import discover
from tests.support.wheels import build_wheel, pip_install, run, virtualenv_with

pytestmark = pytest.mark.heavy

GENERATED_TEST_TIMEOUT = 300.0


def _new(*arguments: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["plugin", "new", *arguments])
    return result.exit_code, result.output


def test_each_kind_is_a_complete_ruff_clean_package(tmp_path: Path) -> None:
    for kind in KINDS:
        project = f"aviso-demo-{kind}"
        code, output = _new(project, "--kind", kind, "--directory", str(tmp_path))
        assert code == 0, output
        assert output == f"created {tmp_path / project}\n"
        module = names_for(project, kind).module
        files = {
            str(path.relative_to(tmp_path / project)) for path in (tmp_path / project).rglob("*")
        }
        assert {
            "pyproject.toml",
            "README.md",
            f"{module}/__init__.py",
            f"{module}/py.typed",
            f"tests/test_{module}.py",
        } <= files
        pyproject = (tmp_path / project / "pyproject.toml").read_text()
        assert f'[project.entry-points.aviso]\n{module.removeprefix("aviso_")} = "{module}"' in (
            pyproject
        )
        assert "aviso_host" not in (tmp_path / project / module / "__init__.py").read_text()
        # aviso-py's own page, not ECMWF's aviso client repository.
        readme = (tmp_path / project / "README.md").read_text()
        assert "[aviso-py](https://pypi.org/project/aviso-py/)" in readme
        assert "github.com/ecmwf/aviso)" not in readme
    for check in (("check", "--no-cache"), ("format", "--check", "--no-cache")):
        linted = run([sys.executable, "-m", "ruff", *check, "."], tmp_path, 120)
        assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_longest_name_stays_within_the_line_length(tmp_path: Path) -> None:
    project = "aviso-abcdefghij-klmnopqrstuvw"  # 30 characters
    for kind in KINDS:
        create_package(project, kind, tmp_path / kind)
    for check in (("check", "--no-cache"), ("format", "--check", "--no-cache")):
        linted = run([sys.executable, "-m", "ruff", *check, "."], tmp_path, 120)
        assert linted.returncode == 0, linted.stdout + linted.stderr
    with pytest.raises(StarterError, match="longer than 30 characters"):
        names_for(project + "x", "sink")


def test_names_derive_from_the_package_name() -> None:
    handler = names_for("aviso-colour-handler", "field-handler")
    assert (handler.module, handler.entry_point, handler.name, handler.cls) == (
        "aviso_colour_handler",
        "colour_handler",
        "ColourHandler",
        "ColourHandler",
    )
    assert names_for("aviso-file-store", "backend").name == "file_store"
    assert names_for("aviso-file-store", "backend").cls == "FileStoreBackend"
    assert names_for("aviso-hello-world", "command").name == "hello-world"
    spool = names_for("aviso-spool-delivery", "delivery")
    assert (spool.name, spool.cls) == ("spool_delivery", "SpoolDelivery")


def test_the_command_offers_every_kind() -> None:
    new = plugin_tools.commands["new"]
    (kind,) = [param for param in new.params if param.name == "kind"]
    assert list(kind.type.choices) == list(KINDS)


def test_names_that_would_not_work_are_refused(tmp_path: Path) -> None:
    registry = discover()
    for project, kind, message in (
        ("aviso-int", "field-handler", "field handler 'IntHandler' already exists"),
        ("aviso-serve", "command", "command 'serve' already exists"),
        ("aviso-spark", "command", "command 'spark' already exists"),
        ("aviso-in-memory", "backend", "storage backend 'in_memory' already exists"),
        ("aviso-webhook", "delivery", "delivery kind 'webhook' already exists"),
        # The subscriptions section's own keys: ``subscriptions.<kind>`` is the kind's.
        ("aviso-max-total", "delivery", "delivery kind 'max_total' already exists"),
        ("aviso-enabled", "delivery", "delivery kind 'enabled' already exists"),
        ("aviso colour", "sink", "is not a package name"),
        ("aviso-1st", "sink", "must not start with a digit"),
    ):
        with pytest.raises(StarterError, match=message):
            create_package(project, kind, tmp_path, registry)
    create_package("aviso-paint", "sink", tmp_path, registry)
    code, output = _new("aviso-paint", "--kind", "sink", "--directory", str(tmp_path))
    assert code == 1 and output == f"Error: {tmp_path / 'aviso-paint'} already exists\n"
    code, output = _new("aviso-paint", "--kind", "widget")
    assert code == 2 and "'widget' is not one of" in output


@pytest.mark.parametrize(
    ("kind", "outcome"),
    [("field-handler", "3 passed, 1 skipped"), ("delivery", "4 passed, 1 skipped")],
)
def test_generated_tests_pass_from_the_checkout(tmp_path: Path, kind: str, outcome: str) -> None:
    """Before installing: the kit registers the plugin module itself (the test that needs
    the installed entry point is skipped)."""
    target = create_package("aviso-shade", kind, tmp_path)
    result = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        target,
        GENERATED_TEST_TIMEOUT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert outcome in result.stdout


@pytest.mark.install
@pytest.mark.timeout(900)
def test_every_kind_installs_and_passes_its_tests_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "build")
    python = virtualenv_with(wheel, tmp_path / "venv")
    server = str(python.parent / "aviso-server")
    packages = tmp_path / "packages"
    projects = {kind: f"aviso-starter-{kind}" for kind in KINDS}
    for kind, project in projects.items():
        # The installed wheel's own templates: package data, not this checkout.
        made = run(
            [server, "plugin", "new", project, "--kind", kind, "--directory", str(packages)],
            tmp_path,
        )
        assert made.returncode == 0, made.stderr
    installed = pip_install(
        python, "--no-build-isolation", *(str(packages / project) for project in projects.values())
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listing = run([server, "plugins", "--json"], tmp_path)
    assert listing.returncode == 0, listing.stderr
    found = {plugin["name"]: plugin for plugin in json.loads(listing.stdout)}
    for kind, project in projects.items():
        names = names_for(project, kind)
        plugin = found[names.entry_point]
        assert (plugin["state"], plugin["distribution"], plugin["version"]) == (
            "loaded",
            project,
            "0.1.0",
        )
        # Exactly the one name its README, configuration and tests select.
        assert list(plugin["provides"].values()) == [[names.name]], plugin
    failures = []
    for project in projects.values():
        tested = run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            packages / project,
            GENERATED_TEST_TIMEOUT,
        )
        # Every test runs, the one needing the installed entry point included.
        if tested.returncode != 0 or "skipped" in tested.stdout:
            failures.append(f"{project}:\n{tested.stdout[-3000:]}{tested.stderr[-2000:]}")
    assert not failures, "\n".join(failures)


def test_the_plugin_guide_points_to_the_starter_not_to_the_test_tree() -> None:
    """An installed aviso-py has no tests/ folder: what the guide cites must ship."""
    guide = (Path(__file__).resolve().parents[3] / "docs" / "plugins.md").read_text()
    assert "`tests/" not in guide and " tests/" not in guide
    assert "aviso-server plugin new NAME --kind" in guide
    assert "|".join(KINDS) in guide
