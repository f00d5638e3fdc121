"""The stack's own PostgreSQL cluster: reachable, migratable, transactional."""

from __future__ import annotations

import psycopg
import pytest

from fennel_dagster.settings import Settings

pytestmark = pytest.mark.services


def test_platform_and_dagster_databases_exist(settings: Settings) -> None:
    with psycopg.connect(settings.pg_dsn("postgres")) as conn:
        names = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
    assert {settings.pg_db, settings.dagster_pg_db} <= names


def test_schema_created_in_a_transaction_is_visible_after_commit(
    settings: Settings, unique_name: str
) -> None:
    with psycopg.connect(settings.pg_dsn()) as conn:
        with conn.transaction():
            conn.execute(f"CREATE SCHEMA {unique_name}")
            conn.execute(f"CREATE TABLE {unique_name}.t (id int primary key, v text)")
            conn.execute(f"INSERT INTO {unique_name}.t VALUES (1, 'a')")
        assert conn.execute(f"SELECT v FROM {unique_name}.t").fetchall() == [("a",)]
        conn.execute(f"DROP SCHEMA {unique_name} CASCADE")
        conn.commit()


def test_rolled_back_transaction_leaves_nothing(settings: Settings, unique_name: str) -> None:
    with psycopg.connect(settings.pg_dsn()) as conn:
        with pytest.raises(RuntimeError):
            with conn.transaction():
                conn.execute(f"CREATE SCHEMA {unique_name}")
                conn.execute(f"CREATE TABLE {unique_name}.t (id int)")
                raise RuntimeError("fail mid-migration")
        found = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
            (unique_name,),
        ).fetchone()
    assert found == (0,)
