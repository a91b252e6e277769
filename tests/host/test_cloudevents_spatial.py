"""Spatial values in delivered CloudEvents are JSON arrays whatever was stored."""

import json

import pytest

from aviso_host.cloudevents import spatial_output, with_spatial_arrays

SQUARE = [[0.0, 0.0], [0.0, 10.0], [10.0, 10.0], [10.0, 0.0], [0.0, 0.0]]
CANONICAL = json.dumps(SQUARE, separators=(",", ":"))


@pytest.mark.parametrize(
    ("identifier", "metadata"),
    [
        # This service since 0.11 compatibility: the polygon stored apart, canonical JSON.
        ({"tag": "a"}, {"spatial_geometry": CANONICAL}),
        # Legacy text stored apart.
        ({"tag": "a"}, {"spatial_geometry": "(0,0,0,10,10,10,10,0,0,0)"}),
        # Older records: the polygon text inside the identifier too.
        ({"tag": "a", "polygon": "0,0,0,10,10,10,10,0,0,0"}, {"spatial_geometry": "ignored"}),
        ({"tag": "a", "polygon": " [[0,0],[0,10],[10,10],[10,0],[0,0]]"}, {}),
    ],
    ids=["canonical", "legacy-apart", "legacy-inside", "json-text-inside"],
)
def test_polygon_is_delivered_as_an_array(
    identifier: dict[str, str], metadata: dict[str, str]
) -> None:
    rendered = with_spatial_arrays(json.dumps(identifier), metadata, ("polygon",))
    assert json.loads(rendered) == {"tag": "a", "polygon": SQUARE}
    # Keys stay sorted, as in every stored identifier.
    assert rendered.index('"polygon"') < rendered.index('"tag"')


def test_point_cloud_is_delivered_as_an_array() -> None:
    metadata = {"spatial_point_cloud": "[[1.0,2.0],[1.0,2.0]]"}
    rendered = with_spatial_arrays('{"tag":"a"}', metadata, ("point_cloud",))
    assert rendered == '{"point_cloud":[[1.0,2.0],[1.0,2.0]],"tag":"a"}'


@pytest.mark.parametrize("text", ['[[1,2]],"x":[[3,4]]', "not coordinates", "[[1,2]"])
def test_foreign_text_never_breaks_the_json(text: str) -> None:
    rendered = with_spatial_arrays('{"tag":"a"}', {"spatial_geometry": text}, ("polygon",))
    assert json.loads(rendered)["polygon"] == spatial_output(text)


def test_unreadable_values_are_shown_as_stored() -> None:
    assert spatial_output("not coordinates") == "not coordinates"
    assert spatial_output("(1,2,3)") == "(1,2,3)"
