import pytest

from aviso_builtins.schema_handlers import point_cloud
from aviso_builtins.schema_handlers.point_cloud import PointCloudHandler
from aviso_builtins.schema_handlers.spatial import PolygonHandler
from aviso_plugins.types import InvalidValue


def handler(**options: int) -> PointCloudHandler:
    return PointCloudHandler("point_cloud", {"required": True, **options})


def test_hook_lists_the_point_cloud_handler() -> None:
    assert point_cloud.aviso_field_handlers() == [PointCloudHandler]
    assert PointCloudHandler.spatial and PointCloudHandler.point_cloud
    assert not PolygonHandler.point_cloud


def test_canonical_value_is_compact_json() -> None:
    assert handler().canonicalise_value([[1, 2], [1, 2.5]], 10) == "[[1.0,2.0],[1.0,2.5]]"


def test_max_points_defaults_to_10000_and_is_checked_first() -> None:
    assert handler().max_points == 10_000
    with pytest.raises(InvalidValue) as caught:
        handler(max_points=2).canonicalise_value([["x"]] * 3, 10)
    assert caught.value.message == "field 'point_cloud' point cloud contains 3 points, maximum is 2"


def test_canonical_size_is_capped() -> None:
    cloud = [[12.345678901234567, 123.45678901234567]] * 2000
    with pytest.raises(InvalidValue) as caught:
        handler().canonicalise_value(cloud, 10)
    size = len(handler().canonicalise_value(cloud[:1], 10)) * 2000 - 1999 * 2 + 1999
    assert caught.value.message == (
        f"field 'point_cloud' point cloud canonical JSON is {size} bytes, maximum is 61440 bytes"
    )


def test_text_is_refused() -> None:
    with pytest.raises(InvalidValue, match=r"must be a valid point cloud: .*got string"):
        handler().canonicalise("1,2,3,4")
    with pytest.raises(InvalidValue, match=r"must be a valid point cloud: .*got string"):
        handler().canonicalise_value("[[1, 2]]", 10)


def test_describe_shows_max_points() -> None:
    assert handler(max_points=5).describe() == {
        "type": "PointCloudHandler",
        "required": True,
        "max_points": 5,
        "value_kind": "point",
        "operators": [],
    }
