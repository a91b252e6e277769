import pytest

from aviso_builtins.schema_handlers import spatial
from aviso_builtins.schema_handlers.spatial import PolygonHandler
from aviso_plugins.types import InvalidValue


def handler() -> PolygonHandler:
    return PolygonHandler("polygon", {"required": True})


def test_hook_lists_the_polygon_handler() -> None:
    assert spatial.aviso_field_handlers() == [PolygonHandler]
    assert PolygonHandler.spatial
    assert not PolygonHandler.operators


@pytest.mark.parametrize(
    "text",
    [
        "(50,10,52,10,52,12,50,12,50,10)",
        "50,10,52,10,52,12,50,12,50,10",
        " ( 50 , 10 , 52 , 10 , 52 , 12 , 50 , 10 ) ",
        "(90,-180,0,0,1,1,90,-180)",
    ],
)
def test_polygon_canonical_is_input_unchanged(text: str) -> None:
    assert handler().canonicalise(text) == text


def test_polygon_vertices_latitude_first() -> None:
    assert handler().polygon("(0,0,0,10,10,10,10,0,0,0)") == [
        (0.0, 0.0),
        (0.0, 10.0),
        (10.0, 10.0),
        (10.0, 0.0),
        (0.0, 0.0),
    ]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("(50,10,52,10,50,10)", "at least 4 coordinate pairs required, got 3"),
        ("(50,10,52,10,52,12,50,12)", "polygon is not closed: the first and last pairs differ"),
        ("(50,10,52,10,52,12,50,10", "unbalanced parentheses"),
        ("(50,10),52,10,52,12,50,10)", "nested parentheses are not allowed"),
        ("()", "polygon has no coordinates"),
        ("(50,10,52)", "odd number of coordinate values (3)"),
        ("(90.5,10,50,10,50,11,90.5,10)", "latitude 90.5 is outside [-90, 90]"),
        ("(50,180.5,50,10,50,11,50,180.5)", "longitude 180.5 is outside [-180, 180]"),
        ("", "polygon cannot be empty"),
    ],
)
def test_polygon_rejects(text: str, reason: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        handler().canonicalise(text)
    assert caught.value.message == f"field 'polygon' must be a valid polygon: {reason}"
    assert caught.value.details == reason


def test_polygon_supports_no_constraints() -> None:
    with pytest.raises(InvalidValue, match="does not support constraint filters"):
        handler().compile_constraint("eq", "x")


def test_polygon_describe() -> None:
    assert handler().describe() == {
        "type": "PolygonHandler",
        "required": True,
        "value_kind": "polygon",
        "operators": [],
    }
