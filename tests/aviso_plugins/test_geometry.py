import pytest

from aviso_plugins._shared.geometry import bounding_box, parse_point_text, parse_polygon_text
from aviso_plugins._shared.numbers import float_display

SQUARE = [(50.0, 10.0), (52.0, 10.0), (52.0, 12.0), (50.0, 12.0), (50.0, 10.0)]


@pytest.mark.parametrize(
    "text",
    [
        "(50,10,52,10,52,12,50,12,50,10)",
        "50,10,52,10,52,12,50,12,50,10",
        "( 50 , 10 , 52 , 10 , 52 , 12 , 50 , 12 , 50 , 10 )",
        "  (50,10,52,10,52,12,50,12,50,10)  ",
        "( 50,10,52,10,52,12,50,12,50,10 )",
        "(50.0,10,52,10,52,12,50,12,50,1e1)",
    ],
)
def test_polygon_accepts(text: str) -> None:
    assert parse_polygon_text(text) == SQUARE


def test_polygon_closure_is_numeric() -> None:
    points = parse_polygon_text("0,0,0,10,10,10,-0,0.0")
    assert points[0] == points[-1]


@pytest.mark.parametrize(
    "text",
    [
        "(90,-180,0,0,1,1,90,-180)",
        "(-90,180,0,0,1,1,-90,180)",
        "(50,10,52,10,50,10,50,10)",  # degenerate shapes are not checked
    ],
)
def test_polygon_accepts_bounds_and_degenerate_rings(text: str) -> None:
    assert len(parse_polygon_text(text)) == 4


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "cannot be empty"),
        ("   ", "cannot be empty"),
        ("()", "no coordinates"),
        ("( )", "no coordinates"),
        ("(50,10,52,10,50,10)", "at least 4 coordinate pairs"),
        ("(50,10,52,10,52,12,50,12)", "not closed"),
        ("(50,10,52,10,52,12,50,10", "unbalanced parentheses"),
        ("50,10,52,10,52,12,50,10)", "unbalanced parentheses"),
        ("(", "unbalanced parentheses"),
        ("(50,10),52,10,52,12,50,10)", "nested parentheses"),
        ("((50,10,52,10,52,12,50,10))", "nested parentheses"),
        ("(50,10),(52,10),(52,12),(50,10)", "nested parentheses"),
        ("(50,10,52)", "odd number"),
        ("(50,10,52,10,52,12,50,10,)", "odd number"),
        ("(91,10,50,10,50,11,91,10)", "latitude 91 is outside"),
        ("(90.5,10,50,10,50,11,90.5,10)", "latitude 90.5 is outside"),
        ("(50,180.5,50,10,50,11,50,180.5)", "longitude 180.5 is outside"),
        ("(nan,10,50,10,50,11,nan,10)", "latitude nan is outside"),
        ("(50,inf,50,10,50,11,50,inf)", "longitude inf is outside"),
        ("(50,10,52,x,52,12,50,10)", "invalid coordinate 'x'"),
        ("(50,10,52,,52,12,50,10)", "invalid coordinate ''"),
        ("(50,10,52,1_0,52,12,50,10)", "invalid coordinate '1_0'"),
        ("50;10;52;10;52;12;50;10", "odd number"),
    ],
)
def test_polygon_rejects(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        parse_polygon_text(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("52.55,13.5", (52.55, 13.5)),
        ("(52.55, 13.5)", (52.55, 13.5)),
        (" ( 52.55 , 13.5 ) ", (52.55, 13.5)),
        ("90,-180", (90.0, -180.0)),
        ("5,5", (5.0, 5.0)),
    ],
)
def test_point_accepts(text: str, expected: tuple[float, float]) -> None:
    assert parse_point_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "()",
        "52.55",
        "52.5",
        "1,2,3",
        "52.55,13.5,0",
        "91,0",
        "0,181",
        "NaN,0",
        "(52.55,13.5",
        "52.55,13.5)",
        "((52.55,13.5))",
        "52.55;13.5",
    ],
)
def test_point_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_point_text(text)


def test_bounding_box_of_spec_polygon() -> None:
    points = parse_polygon_text("(47.1,8.2,47.4,8.6,47.2,9.0,46.9,8.5,47.1,8.2)")
    box = bounding_box(points)
    assert box == (46.9, 8.2, 47.4, 9.0)
    assert ",".join(map(float_display, box)) == "46.9,8.2,47.4,9"


def test_bounding_box_of_single_point() -> None:
    assert bounding_box([(1.0, 2.0)]) == (1.0, 2.0, 1.0, 2.0)
