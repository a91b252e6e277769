import jsonschema
import pluggy
import pytest

from aviso_builtins.schema_handlers import numeric, spatial, temporal, text
from aviso_plugins import PROJECT_NAME, hookspecs
from aviso_plugins.types import FieldHandler, InvalidValue

EIGHT = {
    "StringHandler",
    "DateHandler",
    "TimeHandler",
    "EnumHandler",
    "IntHandler",
    "FloatHandler",
    "ExpverHandler",
    "PolygonHandler",
}


def registered_handlers() -> list[type[FieldHandler]]:
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    for module in (text, temporal, numeric, spatial):
        manager.register(module)
    manager.check_pending()
    return [handler for group in manager.hook.aviso_field_handlers() for handler in group]


def test_the_four_modules_provide_the_eight_handlers_once() -> None:
    names = [handler.type_name for handler in registered_handlers()]
    assert sorted(names) == sorted(EIGHT)


@pytest.mark.parametrize("handler", registered_handlers(), ids=lambda handler: handler.type_name)
def test_option_schemas_are_valid_json_schemas(handler: type[FieldHandler]) -> None:
    assert issubclass(handler, FieldHandler)
    for schema in handler.options.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    assert handler.required_options <= set(handler.options)


def test_only_polygon_is_spatial() -> None:
    assert [h.type_name for h in registered_handlers() if h.spatial] == ["PolygonHandler"]


@pytest.mark.parametrize(
    "handler",
    [h for h in registered_handlers() if not h.operators],
    ids=lambda handler: handler.type_name,
)
def test_scalar_only_handlers_refuse_constraints(handler: type[FieldHandler]) -> None:
    assert handler.type_name in {
        "StringHandler",
        "DateHandler",
        "TimeHandler",
        "ExpverHandler",
        "PolygonHandler",
    }
    with pytest.raises(InvalidValue, match="does not support constraint filters"):
        handler("f", {"required": False}).compile_constraint("eq", 1)
