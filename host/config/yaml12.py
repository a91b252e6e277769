"""A PyYAML loader with YAML 1.2 core-schema scalars, as aviso-server reads its files.

PyYAML implements YAML 1.1, where ``yes``/``no``/``on``/``off`` are booleans, ``12:30`` is a
base-60 number, ``2025-07-06`` is a date and ``010`` is octal. Configuration written for
aviso-server relies on all of those staying plain text (enum values, role names, dates),
so only the core-schema forms are resolved implicitly here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable
from typing import Any, ClassVar

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

_DIGITS = "0123456789"


class Yaml12Loader(yaml.SafeLoader):
    """SafeLoader whose implicit typing follows the YAML 1.2 core schema."""

    # Start from nothing instead of inheriting the YAML 1.1 resolvers. PyYAML reads it from the
    # class (add_implicit_resolver copies it there); its stubs declare an instance attribute.
    yaml_implicit_resolvers: ClassVar[dict[str | None, list[tuple[str, re.Pattern[str]]]]] = {}  # type: ignore[misc]

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Hashable, Any]:
        """Keep every key as the text written in the file.

        Keys are names (event types, realms, fields), never numbers or booleans, so
        ``2024:`` or ``true:`` must not turn into ``int``/``bool`` keys that no lookup by
        name would find.
        """
        if not isinstance(node, MappingNode):
            raise ConstructorError(
                None,
                None,
                f"expected a mapping node, but found {getattr(node, 'id', 'node')}",
                node.start_mark,
            )
        mapping: dict[Hashable, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    "found a non-scalar key",
                    key_node.start_mark,
                )
            mapping[key_node.value] = self.construct_object(value_node, deep=deep)
        return mapping


def _construct_int(loader: yaml.SafeLoader, node: ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    try:
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        # Leading zeros are decimal in YAML 1.2 (``010`` is ten, not eight).
        return int(text, 10)
    except ValueError:
        raise ConstructorError(None, None, f"invalid integer {text!r}", node.start_mark) from None


def _construct_float(loader: yaml.SafeLoader, node: ScalarNode) -> float:
    text = str(loader.construct_scalar(node))
    lowered = text.lower()
    if lowered in (".inf", "+.inf"):
        return math.inf
    if lowered == "-.inf":
        return -math.inf
    if lowered == ".nan":
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ConstructorError(None, None, f"invalid float {text!r}", node.start_mark) from None


Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)
# Integers are registered before floats: both patterns match plain digits.
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+" + _DIGITS),
)
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+." + _DIGITS),
)
Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def load_yaml(text: str) -> Any:
    """Parse one YAML document; raises :class:`yaml.YAMLError` when it is malformed."""
    # ``yaml.load`` is safe here: the loader derives from SafeLoader.
    return yaml.load(text, Loader=Yaml12Loader)
