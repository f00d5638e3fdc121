"""The one settings object: loopback defaults, FENNEL_* variables, a settings file, hand-over."""

from __future__ import annotations

from pathlib import Path

import pytest

from fennel_dagster.settings import Settings, project_root


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No FENNEL_* variables, cwd in an empty directory (no project, no settings file)."""
    import os

    for name in list(os.environ):
        if name.startswith("FENNEL_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_are_loopback_on_non_default_ports(clean_env: Path) -> None:
    s = Settings()
    assert s.home_dir == clean_env / ".fennel"
    assert s.kafka_servers == "127.0.0.1:59092"
    assert s.platform_pg_dsn == "host=127.0.0.1 port=55432 user=fennel dbname=fennel"
    assert s.dagster_pg_url == "postgresql+psycopg2://fennel@127.0.0.1:55432/dagster"
    assert s.s3_url == "http://127.0.0.1:59000"
    assert s.state_path == clean_env / ".fennel" / "state"
    assert s.spark_jars_path == clean_env / ".fennel" / "jars" / "spark"
    assert s.dagster_home_path == clean_env / ".fennel" / "dagster"
    assert s.spark_master == "local[*]"


def test_environment_overrides_defaults_and_derived_endpoints_follow(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FENNEL_PG_PORT", "6000")
    monkeypatch.setenv("FENNEL_KAFKA_BOOTSTRAP", "broker-a:9092,broker-b:9092")
    monkeypatch.setenv("FENNEL_S3_EMBEDDED", "true")
    s = Settings()
    assert s.pg_dsn("x") == "host=127.0.0.1 port=6000 user=fennel dbname=x"
    assert s.kafka_servers == "broker-a:9092,broker-b:9092"
    assert s.s3_url is None and s.local_object_dir == clean_env / ".fennel" / "objects"


def test_home_is_found_from_a_subdirectory_of_the_project(clean_env: Path) -> None:
    (clean_env / "workspace.yaml").write_text("load_from: []\n")
    (clean_env / "dagster.yaml").write_text("telemetry: {enabled: false}\n")
    sub = clean_env / "a" / "b"
    sub.mkdir(parents=True)
    assert project_root(sub) == clean_env


@pytest.mark.parametrize(
    "name, text",
    [("fennel.toml", 'pg_port = 6100\nnamespace = "acme"\n'),
     ("fennel.env", "FENNEL_PG_PORT=6100\nFENNEL_NAMESPACE=acme\n")],
)  # fmt: skip
def test_settings_file_in_the_project_root_is_read_and_env_still_wins(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    (clean_env / "workspace.yaml").write_text("load_from: []\n")
    (clean_env / "dagster.yaml").write_text("telemetry: {enabled: false}\n")
    (clean_env / name).write_text(text)
    assert (Settings().pg_port, Settings().namespace) == (6100, "acme")
    monkeypatch.setenv("FENNEL_PG_PORT", "6200")
    assert Settings().pg_port == 6200


def test_named_settings_file_must_exist(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FENNEL_SETTINGS_FILE", str(clean_env / "missing.toml"))
    with pytest.raises(FileNotFoundError, match="FENNEL_SETTINGS_FILE"):
        Settings()


def test_as_env_hands_the_same_settings_to_a_child_process(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Settings(pg_port=6300, home=Path("rel/home"), s3_embedded=True)
    for key, value in original.as_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir("/")
    child = Settings()
    assert child == original.with_(home=clean_env / "rel" / "home")
    assert child.home_dir == clean_env / "rel" / "home"
