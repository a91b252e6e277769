"""Sources and precedence."""

from pathlib import Path

import pytest

from aviso_host.config import ConfigError, load_document, load_settings, loader
from aviso_host.config.loader import apply_environment, deep_merge
from tests.host.config.config_stubs import make_registry


@pytest.fixture(autouse=True)
def no_system_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(loader, "SYSTEM_CONFIG", tmp_path / "etc" / "config.yaml")


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


DEFAULT_FILE = """
application: {host: 127.0.0.1, port: 8000}
notification_backend: {kind: in_memory}
logging: {level: debug}
"""

ENV_ONLY = {
    "AVISOSERVER_APPLICATION__HOST": "127.0.0.1",
    "AVISOSERVER_APPLICATION__PORT": "8000",
    "AVISOSERVER_NOTIFICATION_BACKEND__KIND": "in_memory",
}


def test_environment_alone_is_a_complete_configuration(cwd: Path, home: Path) -> None:
    settings = load_settings(make_registry(), environ=ENV_ONLY, cwd=cwd, home=home)
    assert settings.application.port == 8000
    assert settings.application.base_url == "http://localhost"
    assert settings.backend.kind == "in_memory"
    assert not settings.schemas_configured
    assert settings.strict is False


def test_no_file_and_no_environment_fails(cwd: Path, home: Path) -> None:
    with pytest.raises(
        ConfigError, match="missing required keys 'application', 'notification_backend'"
    ):
        load_settings(make_registry(), environ={}, cwd=cwd, home=home)


def test_no_file_names_every_place_looked_for(cwd: Path, home: Path) -> None:
    environ = {"AVISOSERVER_APPLICATION__PORT": "8000"}
    with pytest.raises(ConfigError) as refused:
        load_settings(make_registry(), environ=environ, cwd=cwd, home=home)
    looked = [cwd / "configuration" / "config.yaml", loader.SYSTEM_CONFIG]
    looked.append(home / ".aviso_server" / "config.yaml")
    assert str(refused.value).endswith(
        f"(no configuration file: looked for {', '.join(map(str, looked))})"
    )


def test_the_packaged_example_is_read_only_when_nothing_configures_the_server(
    cwd: Path, home: Path
) -> None:
    example = loader.packaged_example
    assert example({}, cwd, home) == loader.EXAMPLE_CONFIG
    # A variable or two apply over the example; both required sections are a configuration.
    assert example({"AVISOSERVER_APPLICATION__PORT": "8100"}, cwd, home) == loader.EXAMPLE_CONFIG
    assert example(ENV_ONLY, cwd, home) is None
    assert example({"AVISOSERVER_CONFIG_FILE": "mine.yaml"}, cwd, home) is None
    write(home / ".aviso_server" / "config.yaml", "application: {port: 9000}")
    assert example({}, cwd, home) is None
    # The example is a whole configuration (the one a checkout reads by default).
    environ = {"AVISOSERVER_CONFIG_FILE": str(loader.EXAMPLE_CONFIG)}
    assert load_document(environ, cwd, home)["notification_backend"]["kind"] == "in_memory"


def test_a_relative_config_file_that_does_not_exist_names_where_it_was_looked_for(
    cwd: Path, home: Path
) -> None:
    environ = {"AVISOSERVER_CONFIG_FILE": "conf/missing.yaml"}
    with pytest.raises(ConfigError) as refused:
        load_document(environ, cwd, home)
    assert str(refused.value) == (
        "AVISOSERVER_CONFIG_FILE does not point to a file: conf/missing.yaml "
        f"(looked for {cwd / 'conf' / 'missing.yaml'})"
    )


def test_config_file_that_does_not_exist_fails_despite_default_file(cwd: Path, home: Path) -> None:
    write(cwd / "configuration" / "config.yaml", DEFAULT_FILE)
    environ = {"AVISOSERVER_CONFIG_FILE": "/nonexistent.yaml"}
    with pytest.raises(ConfigError, match="AVISOSERVER_CONFIG_FILE does not point to a file"):
        load_document(environ, cwd, home)


@pytest.mark.parametrize("value", ["", "   ", "\t\n"])
def test_blank_config_file_variable_fails(value: str, cwd: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match="AVISOSERVER_CONFIG_FILE is set but empty"):
        load_document({"AVISOSERVER_CONFIG_FILE": value}, cwd, home)


def test_config_file_variable_that_is_not_text_fails(cwd: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match="not valid text"):
        load_document({"AVISOSERVER_CONFIG_FILE": "conf\udcff.yaml"}, cwd, home)


def test_config_file_pointing_to_a_directory_fails(cwd: Path, home: Path) -> None:
    (cwd / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match="does not point to a file"):
        load_document({"AVISOSERVER_CONFIG_FILE": "dir.yaml"}, cwd, home)


def test_config_file_is_the_only_file_source(cwd: Path, home: Path, tmp_path: Path) -> None:
    write(cwd / "configuration" / "config.yaml", DEFAULT_FILE)
    write(home / ".aviso_server" / "config.yaml", "application: {port: 9000}")
    chosen = write(
        tmp_path / "chosen.yaml",
        "application: {host: 0.0.0.0, port: 8100}\nnotification_backend: {kind: in_memory}",
    )
    environ = {"AVISOSERVER_CONFIG_FILE": f"  {chosen}  "}
    settings = load_settings(make_registry(), environ=environ, cwd=cwd, home=home)
    assert settings.application.port == 8100
    assert settings.logging.level == "info"  # the default file's "debug" was not read


def test_relative_config_file_is_resolved_against_the_working_directory(
    cwd: Path, home: Path
) -> None:
    write(cwd / "conf" / "mine.yml", "application: {port: 8100}")
    document = load_document({"AVISOSERVER_CONFIG_FILE": "conf/mine.yml"}, cwd, home)
    assert document == {"application": {"port": 8100}, "config_file": "conf/mine.yml"}


def test_cascade_deep_merges_later_files_over_earlier(cwd: Path, home: Path) -> None:
    write(cwd / "configuration" / "config.yaml", DEFAULT_FILE)
    write(home / ".aviso_server" / "config.yaml", "application:\n  port: 9000\n")
    settings = load_settings(make_registry(), environ={}, cwd=cwd, home=home)
    assert settings.application.port == 9000
    assert settings.application.host == "127.0.0.1"
    assert settings.logging.level == "debug"


def test_cascade_order_is_working_directory_then_system_then_home(cwd: Path, home: Path) -> None:
    write(cwd / "configuration" / "config.yaml", "a: {x: cwd, y: cwd, z: cwd}")
    write(loader.SYSTEM_CONFIG, "a: {y: system, z: system}")
    write(home / ".aviso_server" / "config.yaml", "a: {z: home}")
    assert load_document({}, cwd, home) == {"a": {"x": "cwd", "y": "system", "z": "home"}}


def test_environment_override_wins_over_files(cwd: Path, home: Path) -> None:
    write(cwd / "configuration" / "config.yaml", DEFAULT_FILE)
    environ = {"AVISOSERVER_APPLICATION__PORT": "8100"}
    settings = load_settings(make_registry(), environ=environ, cwd=cwd, home=home)
    assert settings.application.port == 8100
    assert settings.application.host == "127.0.0.1"


def test_json_files_are_read_by_extension(tmp_path: Path, cwd: Path, home: Path) -> None:
    path = write(tmp_path / "c.json", '{"application": {"host": "h", "port": 1}}')
    document = load_document({"AVISOSERVER_CONFIG_FILE": str(path)}, cwd, home)
    assert document["application"] == {"host": "h", "port": 1}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("c.toml", "a = 1", "unsupported configuration file extension"),
        ("c.yaml", "a: [1", "malformed configuration file"),
        ("c.yaml", "- a\n- b", "must be a mapping"),
        ("c.yaml", "a: 1\n---\nb: 2", "malformed configuration file"),
        ("c.json", "{", "malformed configuration file"),
        ("c.json", '{"a": NaN}', "malformed configuration file"),
        ("c.json", "[]", "must be a mapping"),
    ],
)
def test_unusable_files_fail(
    name: str, text: str, message: str, tmp_path: Path, cwd: Path, home: Path
) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(ConfigError, match=message):
        load_document({"AVISOSERVER_CONFIG_FILE": str(path)}, cwd, home)


def test_file_that_is_not_utf8_fails(tmp_path: Path, cwd: Path, home: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_document({"AVISOSERVER_CONFIG_FILE": str(path)}, cwd, home)


def test_default_location_that_is_not_a_file_fails(cwd: Path, home: Path) -> None:
    (cwd / "configuration" / "config.yaml").mkdir(parents=True)
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_document({}, cwd, home)


def test_empty_yaml_file_is_an_empty_document(tmp_path: Path, cwd: Path, home: Path) -> None:
    path = write(tmp_path / "c.yaml", "# nothing yet\n")
    assert load_document({"AVISOSERVER_CONFIG_FILE": str(path)}, cwd, home) == {
        "config_file": str(path)
    }


def test_environment_names_map_to_lower_case_key_paths() -> None:
    document = apply_environment(
        {},
        {
            "AVISOSERVER_NOTIFICATION_BACKEND__JETSTREAM__NATS_URL": "nats://n:4222",
            "AVISOSERVER_NOTIFICATION_SCHEMA_STRICT": "true",
            "avisoserver_logging__level": "debug",
            "AVISOSERVER_NOTIFICATION_SCHEMA__RiverGauge__PAYLOAD__REQUIRED": "true",
            "OTHER_APPLICATION__PORT": "1",
            "AVISOSERVER_": "ignored",
        },
    )
    assert document == {
        "notification_backend": {"jetstream": {"nats_url": "nats://n:4222"}},
        "notification_schema_strict": "true",
        "logging": {"level": "debug"},
        "notification_schema": {"rivergauge": {"payload": {"required": "true"}}},
    }


def test_environment_replaces_only_the_addressed_leaf() -> None:
    original = {"application": {"host": "h", "port": 8000}, "auth": "oops"}
    document = apply_environment(
        original,
        {"AVISOSERVER_APPLICATION__PORT": "", "AVISOSERVER_AUTH__ENABLED": "yes"},
    )
    assert document == {"application": {"host": "h", "port": ""}, "auth": {"enabled": "yes"}}
    assert original == {"application": {"host": "h", "port": 8000}, "auth": "oops"}


def test_config_file_variable_lands_as_an_ignored_key(tmp_path: Path, cwd: Path) -> None:
    path = write(
        tmp_path / "c.yaml",
        "application: {host: h, port: 1}\nnotification_backend: {kind: in_memory}",
    )
    environ = {"AVISOSERVER_CONFIG_FILE": str(path)}
    settings = load_settings(make_registry(), environ=environ, cwd=cwd, home=cwd)
    assert settings.document["config_file"] == str(path)


def test_deep_merge_replaces_scalars_and_lists_whole() -> None:
    base = {"a": {"b": [1, 2], "c": 1, "d": {"e": 1}}}
    assert deep_merge(base, {"a": {"b": [3], "d": {"f": 2}}}) == {
        "a": {"b": [3], "c": 1, "d": {"e": 1, "f": 2}}
    }


def test_the_files_read_are_named_and_the_config_file_path_is_no_secret(
    cwd: Path, home: Path
) -> None:
    path = write(cwd / "mine.yaml", DEFAULT_FILE)
    environ = {"AVISOSERVER_CONFIG_FILE": str(path)}
    settings = load_settings(make_registry(), environ=environ, cwd=cwd, home=home)
    assert settings.files == (str(path),)
    # It lands in the document as the unknown key config_file, yet names a file: shown.
    assert str(path) not in settings.secrets
    write(cwd / "configuration" / "config.yaml", DEFAULT_FILE)
    cascaded = load_settings(make_registry(), environ={}, cwd=cwd, home=home)
    assert cascaded.files == (str(cwd / "configuration" / "config.yaml"),)
