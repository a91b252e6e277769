"""What the HTTP edge (``aviso_host.http_protocol``) and the server (``aviso_host.server``)
rely on of uvicorn, listed and checked against the installed uvicorn, so that an upgrade which
changes one fails naming it.

The edge subclasses uvicorn's httptools protocol: it reads and writes attributes the protocol
sets, overrides callbacks (calling uvicorn's own through ``super()``), reads the request
cycle's state, and replaces the cycle's message event with an object of its own that must
answer every method uvicorn calls on it. None of that is documented uvicorn API, which is why
setup.cfg pins uvicorn to the minor tested here. The lists are checked complete against the
module's source: a new reliance fails here until it is listed. The server subclasses
``uvicorn.Server`` the same way, and runs a second one (the metrics listener) by its parts.
"""

from __future__ import annotations

import ast
import configparser
import inspect
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest
import uvicorn
from packaging.requirements import Requirement
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from aviso_host import http_protocol, server
from aviso_host.http_protocol import AvisoHttpProtocol

ROOT = Path(__file__).resolve().parents[2]
SUBCLASS = "AvisoHttpProtocol"

PROTOCOL_ATTRIBUTES = frozenset(
    {
        "app",  # the ASGI app a refused connection's requests are swapped for
        "client",  # the peer address, for the per-client caps
        "cycle",  # the current request's cycle
        "flow",  # read pausing while a body waits
        "headers",  # the request head's fields, counted toward the head size
        "loop",  # the timers
        "parser",  # method and HTTP version of the head
        "pipeline",  # pipelined requests waiting
        "scope",  # the request's ASGI scope, given aviso's extensions
        "server_state",  # total_requests
        "timeout_keep_alive_task",  # uvicorn's idle timer, replaced by aviso's
        "url",  # the request target, for the probe paths
    }
)
"""Attributes uvicorn's protocol sets that the subclass reads or writes as ``self.<name>``."""

CALLBACKS = {
    "__init__": ("self", "config", "server_state", "app_state", "_loop"),
    "connection_made": ("self", "transport"),
    "connection_lost": ("self", "exc"),
    "data_received": ("self", "data"),
    "send_400_response": ("self", "msg"),
    "on_message_begin": ("self",),
    "on_header": ("self", "name", "value"),
    "on_headers_complete": ("self",),
    "on_body": ("self", "body"),
    "on_message_complete": ("self",),
    "on_response_complete": ("self",),
    "pause_writing": ("self",),
    "resume_writing": ("self",),
}
"""uvicorn's protocol methods the subclass overrides, with their parameters."""

CYCLE_ATTRIBUTES = frozenset(
    {
        "scope",
        "response_started",
        "response_complete",
        "chunked_encoding",
        "expected_content_length",
        "more_body",
        "keep_alive",
        "disconnected",  # also set by aviso when the client is gone
        "message_event",  # replaced by aviso's own signal
    }
)
"""The request cycle's attributes aviso reads (``RequestCycle`` in the module, and a cycle
in a local variable)."""

CHAINED = {
    "flow": ("FlowControl", FlowControl, frozenset({"read_paused", "resume_reading"})),
    "server_state": ("ServerState", ServerState, frozenset({"total_requests"})),
}
"""``self.<attribute>.<name>`` for the uvicorn objects the protocol holds."""


SERVER_ATTRIBUTES = frozenset({"config", "lifespan", "should_exit", "started"})
"""``uvicorn.Server``'s attributes that ``AvisoServer`` and the metrics listener use."""
SERVER_CALLBACKS = {
    "__init__": ("self", "config"),
    "startup": ("self", "sockets"),
    "shutdown": ("self", "sockets"),
    "handle_exit": ("self", "sig", "frame"),
}
"""``uvicorn.Server``'s methods ``AvisoServer`` overrides or the metrics listener calls."""
CONFIG_ATTRIBUTES = frozenset({"http", "timeout_keep_alive", "load", "lifespan_class"})
"""``uvicorn.Config``'s attributes the server sets or uses (``config.<name>``)."""


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _members(cls: type) -> set[str]:
    """What instances of ``cls`` have: its methods and what its methods assign to ``self``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    found = {name for name, _ in inspect.getmembers(cls)}
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        found.update(
            target.attr
            for target in targets
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        )
    return found


def _self_uses(cls: ast.ClassDef) -> tuple[set[str], dict[str, set[str]]]:
    """(``self.<name>``, ``self.<attribute>.<name>``) in the class's source."""
    direct: set[str] = set()
    chained: dict[str, set[str]] = {}
    for node in ast.walk(cls):
        if not isinstance(node, ast.Attribute):
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            direct.add(node.attr)
        elif (
            isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "self"
        ):
            chained.setdefault(node.value.attr, set()).add(node.attr)
    return direct, chained


@pytest.fixture(scope="module")
def subclass() -> ast.ClassDef:
    return _class(ast.parse(Path(inspect.getfile(http_protocol)).read_text()), SUBCLASS)


def own_names(subclass: ast.ClassDef) -> set[str]:
    slots = next(
        ast.literal_eval(node.value)
        for node in subclass.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets)
    )
    methods = {
        n.name for n in subclass.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    return {*slots, *methods}


def test_every_inherited_attribute_the_subclass_uses_is_listed(subclass: ast.ClassDef) -> None:
    direct, _ = _self_uses(subclass)
    unlisted = direct - own_names(subclass) - PROTOCOL_ATTRIBUTES
    assert not unlisted, f"list these uvicorn attributes in PROTOCOL_ATTRIBUTES: {unlisted}"


def test_every_overridden_callback_is_listed(subclass: ast.ClassDef) -> None:
    overridden = {name for name in own_names(subclass) if hasattr(HttpToolsProtocol, name)}
    assert overridden == set(CALLBACKS), "CALLBACKS must list exactly the overridden methods"


def test_every_cycle_and_chained_attribute_is_listed(subclass: ast.ClassDef) -> None:
    _, chained = _self_uses(subclass)
    for attribute, (_, _, names) in CHAINED.items():
        assert chained.get(attribute, set()) <= names, f"list self.{attribute}.* in CHAINED"
    read_on_cycles = {
        node.attr
        for node in ast.walk(subclass)
        if isinstance(node, ast.Attribute)
        and (
            (isinstance(node.value, ast.Name) and node.value.id == "cycle")
            or (isinstance(node.value, ast.Attribute) and node.value.attr == "cycle")
        )
    }
    declared = set(http_protocol.RequestCycle.__annotations__)
    assert read_on_cycles | declared <= CYCLE_ATTRIBUTES, "list them in CYCLE_ATTRIBUTES"


@pytest.mark.parametrize("name", sorted(PROTOCOL_ATTRIBUTES))
def test_uvicorns_protocol_still_has(name: str) -> None:
    assert name in _members(HttpToolsProtocol), (
        f"uvicorn {version('uvicorn')}'s HttpToolsProtocol no longer has '{name}'"
    )


@pytest.mark.parametrize("name", sorted(CALLBACKS))
def test_uvicorns_callback_keeps_its_parameters(name: str) -> None:
    callback = getattr(HttpToolsProtocol, name, None)
    assert callback is not None, f"uvicorn {version('uvicorn')} has no callback '{name}'"
    parameters = tuple(inspect.signature(callback).parameters)
    assert parameters == CALLBACKS[name], (
        f"uvicorn {version('uvicorn')}'s HttpToolsProtocol.{name} takes {parameters}"
    )


@pytest.mark.parametrize("name", sorted(CYCLE_ATTRIBUTES))
def test_uvicorns_request_cycle_still_has(name: str) -> None:
    assert name in _members(RequestResponseCycle), (
        f"uvicorn {version('uvicorn')}'s RequestResponseCycle no longer has '{name}'"
    )


@pytest.mark.parametrize(
    ("attribute", "name"),
    [(attribute, name) for attribute, (_, _, names) in CHAINED.items() for name in sorted(names)],
)
def test_uvicorns_held_objects_still_have(attribute: str, name: str) -> None:
    label, cls, _ = CHAINED[attribute]
    assert name in _members(cls), f"uvicorn {version('uvicorn')}'s {label} no longer has '{name}'"


def test_aviso_s_message_event_answers_what_uvicorn_calls() -> None:
    """The cycle's ``message_event`` is aviso's signal: every method uvicorn's cycle calls on
    it must be one the signal has."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(RequestResponseCycle)))
    called = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "message_event"
    }
    assert called, "uvicorn's cycle no longer uses message_event: review the signal"
    signal = {name for name in dir(http_protocol._Signal) if not name.startswith("_")}
    missing = called - signal
    assert not missing, f"uvicorn {version('uvicorn')} calls message_event.{missing}"


def _called_on(attribute: str) -> set[str]:
    """What uvicorn's protocol and request cycle use of ``self.<attribute>``."""
    called = set()
    for cls in (HttpToolsProtocol, RequestResponseCycle):
        module = ast.parse(inspect.getsource(sys.modules[cls.__module__]))
        _, chained = _self_uses(_class(module, cls.__name__))
        called |= chained.get(attribute, set())
    return called


@pytest.mark.parametrize(
    ("attribute", "replacement"),
    [("flow", http_protocol._FlowControl), ("pipeline", http_protocol._Pipeline)],
)
def test_aviso_s_replacements_answer_what_uvicorn_uses(attribute: str, replacement: type) -> None:
    """The protocol's flow control and pipeline are aviso's own lean objects: everything
    uvicorn's protocol and cycle use of them must be there."""
    used = _called_on(attribute)
    assert used, f"uvicorn no longer uses self.{attribute}: review the replacement"
    # A slotted attribute is a member of the class too.
    missing = {name for name in used if not hasattr(replacement, name)}
    assert not missing, f"uvicorn {version('uvicorn')} uses {attribute}.{missing}"


def test_the_pin_is_the_tested_minor() -> None:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    requirements = [
        Requirement(line)
        for line in setup["options"]["install_requires"].strip().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    [uvicorn] = [r for r in requirements if r.name == "uvicorn"]
    installed = version("uvicorn")
    major, minor, *_ = installed.split(".")
    assert installed in uvicorn.specifier, f"uvicorn {installed} is not what setup.cfg pins"
    assert f"{major}.{int(minor) + 1}" not in uvicorn.specifier, (
        "setup.cfg admits a uvicorn minor that this test has not checked"
    )
    [starlette] = [r for r in requirements if r.name == "starlette"]
    assert any(spec.operator == "<" for spec in starlette.specifier), "Starlette needs a bound"


def test_the_subclass_is_a_uvicorn_protocol() -> None:
    assert issubclass(AvisoHttpProtocol, HttpToolsProtocol)


def test_every_server_reliance_is_listed() -> None:
    tree = ast.parse(Path(inspect.getfile(server)).read_text())
    subclass = _class(tree, "AvisoServer")
    methods = {
        n.name for n in subclass.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    direct, _ = _self_uses(subclass)
    assigned_here = {
        target.attr
        for node in ast.walk(subclass)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
        and target.attr.startswith("_")  # aviso's own; uvicorn's are public names
    }
    unlisted = direct - methods - assigned_here - {"start_error"} - SERVER_ATTRIBUTES
    assert not unlisted, f"list these uvicorn.Server attributes in SERVER_ATTRIBUTES: {unlisted}"
    overridden = {name for name in methods if hasattr(uvicorn.Server, name)}
    assert overridden <= set(SERVER_CALLBACKS), "list the overridden methods in SERVER_CALLBACKS"
    _, chained = _self_uses(_class(tree, "MetricsListener"))
    assert chained.get("_server", set()) <= SERVER_ATTRIBUTES | set(SERVER_CALLBACKS)
    on_configs = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "config"
    }
    assert on_configs <= CONFIG_ATTRIBUTES, "list config.* in CONFIG_ATTRIBUTES"


@pytest.mark.parametrize(
    ("cls", "name"),
    [(uvicorn.Server, name) for name in sorted(SERVER_ATTRIBUTES)]
    + [(uvicorn.Config, name) for name in sorted(CONFIG_ATTRIBUTES)],
    ids=lambda value: value if isinstance(value, str) else value.__name__,
)
def test_uvicorns_server_and_config_still_have(cls: type, name: str) -> None:
    assert name in _members(cls), f"uvicorn {version('uvicorn')}'s {cls.__name__} has no '{name}'"


@pytest.mark.parametrize("name", sorted(SERVER_CALLBACKS))
def test_uvicorns_server_methods_keep_their_parameters(name: str) -> None:
    method = getattr(uvicorn.Server, name, None)
    assert method is not None, f"uvicorn {version('uvicorn')}'s Server has no '{name}'"
    parameters = tuple(inspect.signature(method).parameters)
    assert parameters == SERVER_CALLBACKS[name], (
        f"uvicorn {version('uvicorn')}'s Server.{name} takes {parameters}"
    )
