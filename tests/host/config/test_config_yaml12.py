"""Configuration YAML is read with YAML 1.2 core-schema scalars."""

import math

import pytest

from aviso_host.config.yaml12 import load_yaml


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "Yes", "NO", "y", "n", "Off"])
def test_yaml_1_1_boolean_words_stay_text(word: str) -> None:
    assert load_yaml(f"value: {word}\nlist: [{word}]") == {"value": word, "list": [word]}


@pytest.mark.parametrize("word", ["true", "True", "TRUE"])
def test_true_spellings(word: str) -> None:
    assert load_yaml(f"v: {word}") == {"v": True}


@pytest.mark.parametrize("word", ["false", "False", "FALSE"])
def test_false_spellings(word: str) -> None:
    assert load_yaml(f"v: {word}") == {"v": False}


@pytest.mark.parametrize("text", ["v: null", "v: ~", "v:", "v: Null", "v: NULL"])
def test_nulls(text: str) -> None:
    assert load_yaml(text) == {"v": None}


@pytest.mark.parametrize(
    "text",
    ["12:30", "2025-07-06", "2025-07-06T00:00:00Z", "1_000", "0b101", "=", "<<", ".", "tRUE"],
)
def test_yaml_1_1_only_forms_stay_text(text: str) -> None:
    assert load_yaml(f"v: {text}") == {"v": text}


@pytest.mark.parametrize(
    ("text", "number"),
    [("8000", 8000), ("010", 10), ("0001", 1), ("-7", -7), ("+7", 7), ("0o17", 15), ("0x1F", 31)],
)
def test_integers(text: str, number: int) -> None:
    value = load_yaml(f"v: {text}")["v"]
    assert value == number
    assert type(value) is int


@pytest.mark.parametrize(("text", "number"), [("1.5", 1.5), ("-5.0", -5.0), ("1e3", 1000.0)])
def test_floats(text: str, number: float) -> None:
    assert load_yaml(f"v: {text}") == {"v": number}


def test_special_floats() -> None:
    loaded = load_yaml("a: .inf\nb: -.Inf\nc: .NaN")
    assert loaded["a"] == math.inf
    assert loaded["b"] == -math.inf
    assert math.isnan(loaded["c"])


def test_quoted_scalars_are_text() -> None:
    assert load_yaml('v: ["1", "true", "0001"]') == {"v": ["1", "true", "0001"]}


def test_keys_keep_their_written_text() -> None:
    assert load_yaml("2024: a\ntrue: b\nyes: c\n1.0: d") == {
        "2024": "a",
        "true": "b",
        "yes": "c",
        "1.0": "d",
    }
