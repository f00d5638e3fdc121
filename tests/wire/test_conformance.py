"""No field of the IR is silently ignored: every one has an entry in the conformance table
(``wire.conformance_table``), each Consumed one is read where the table says and proven by a
test that exists, and each Refused one is refused at commit, by the mock and the platform,
with an error that names the parameter and the fix."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pytest

from fennel_dagster import commit_spec, dataset, meta, source
from fennel_dagster.commit.errors import CommitRejected, Violation
from fennel_dagster.commit.server import DefinitionServer
from fennel_dagster.mock import MockClient
from fennel_dagster.sources import S3, Webhook, sink
from fennel_dagster.wire import spec
from fennel_dagster.wire.conformance import EXECUTORS, Consumed, Refused, Structural, covered
from fennel_dagster.wire.conformance_table import TABLE
from tests.wire.reads import ROOT, reader_reads, scope

PENDING: set[str] = set()  # entries whose readers and proof are not checked: none


def spec_fields() -> list[str]:
    return [
        f"{name}.{f.name}"
        for name, obj in vars(spec).items()
        if isinstance(obj, type)
        and dataclasses.is_dataclass(obj)
        and obj.__module__ == spec.__name__
        for f in dataclasses.fields(obj)
    ]


def test_every_field_of_the_ir_has_exactly_one_entry() -> None:
    fields = spec_fields()
    missing = sorted(set(fields) - TABLE.keys())
    assert not missing, (
        f"fields with no conformance entry (add them to wire/conformance_table.py): {missing}"
    )
    stale = sorted(TABLE.keys() - set(fields))
    assert not stale, f"entries for fields that no longer exist: {stale}"


CONSUMED = sorted(k for k, e in TABLE.items() if isinstance(e, Consumed))
CHECKED = [k for k in CONSUMED if k not in PENDING]  # readers and proof checked
REFUSED = sorted(k for k, e in TABLE.items() if isinstance(e, Refused))


@pytest.mark.parametrize("key", CHECKED)
def test_each_reader_reads_the_field(key: str) -> None:
    entry = TABLE[key]
    assert isinstance(entry, Consumed)
    attr = key.split(".", 1)[1]
    for r in entry.readers:
        assert scope(r) is not None, f"{key}: reader {r} does not exist"
        assert reader_reads(r, attr), f"{key}: reader {r} does not read `.{attr}`"


@pytest.mark.parametrize("key", CONSUMED)
def test_each_executor_honours_the_field_or_has_nothing_to_do_with_it(key: str) -> None:
    entry = TABLE[key]
    assert isinstance(entry, Consumed)
    got = covered(entry)
    assert set(got) == set(EXECUTORS), (
        f"{key}: no reader, hand-over or reason for {set(EXECUTORS) - set(got)}"
    )
    for _, via in entry.via:
        assert scope(via) is not None, f"{key}: hand-over {via} does not exist"
    for _, why in entry.moot:
        assert len(why) > 20, f"{key}: say why the executor has nothing to do with it"


def _test_exists(node_id: str) -> bool:
    path, *names = node_id.split("::")
    if not (ROOT / path).is_file():
        return False
    node: ast.AST = ast.parse((ROOT / path).read_text())
    for name in names:
        name = name.split("[", 1)[0]
        found = next(
            (
                n
                for n in ast.iter_child_nodes(node)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and n.name == name
            ),
            None,
        )
        if found is None:
            return False
        node = found
    return bool(names) and names[-1].startswith("test_")


@pytest.mark.parametrize("key", CHECKED)
def test_each_proof_is_a_test_that_exists(key: str) -> None:
    entry = TABLE[key]
    assert isinstance(entry, Consumed)
    assert _test_exists(entry.proof), f"{key}: proof {entry.proof} is not a test"


def test_structural_and_refused_entries_say_why() -> None:
    for key, e in TABLE.items():
        if isinstance(e, Structural):
            assert len(e.reason) > 20, key
        if isinstance(e, Refused):
            assert scope(e.rule) is not None, f"{key}: rule {e.rule} does not exist"
            assert reader_reads(e.rule, key.split(".", 1)[1]), f"{key}: {e.rule} never reads it"


# -- refused: a minimal declaration with the field set, committed on the mock and the platform

OWNER = "t@example.com"
_hook = Webhook(name="hook")
_lake = S3(name="lake")


def _with_source(**kw: Any) -> type:
    @meta(owner=OWNER)
    @source(_hook.endpoint("ev"), disorder="1d", cdc="append", **kw)
    @dataset
    class Events:
        n: int
        ts: datetime

    return Events


def _with_s3_sink(**kw: Any) -> type:
    @meta(owner=OWNER)
    @sink(_lake.bucket("elsewhere", prefix="out", format="delta"), how="incremental", **kw)
    @source(_hook.endpoint("ev"), disorder="1d", cdc="append")
    @dataset
    class Events:
        n: int
        ts: datetime

    return Events


# (the declaration, the IR holding the field, the words the error must contain)
DECLARE: dict[str, tuple[Callable[[], type], Callable[[spec.DatasetSpec], object], str]] = {
    "SinkSpec.every": (lambda: _with_s3_sink(every="1h"), lambda d: d.sinks[0].every, "every="),
    "SinkSpec.renames": (lambda: _with_s3_sink(renames={"a": "b"}),
                         lambda d: d.sinks[0].renames, "renames="),
    "SinkSpec.since": (lambda: _with_s3_sink(since="2024-01-01T00:00:00+00:00"),
                       lambda d: d.sinks[0].since, "since="),
    "SinkSpec.until": (lambda: _with_s3_sink(until="2024-01-01T00:00:00+00:00"),
                       lambda d: d.sinks[0].until, "until="),
}  # fmt: skip


def test_every_refused_field_has_a_declaration() -> None:
    assert sorted(DECLARE) == REFUSED


@pytest.mark.parametrize("key", REFUSED)
def test_a_refused_field_is_refused_naming_the_parameter_and_the_fix(key: str) -> None:
    entry = TABLE[key]
    assert isinstance(entry, Refused)
    build, read, words = DECLARE[key]
    cls = build()
    commit = commit_spec("c", [cls], [])
    assert read(commit.datasets[0]) == entry.value  # the declaration sets the field
    cls_name, attr = key.split(".")
    default = next(f for f in dataclasses.fields(getattr(spec, cls_name)) if f.name == attr)
    assert entry.value != default.default, f"{key}: {entry.value!r} is the default"

    errors = DefinitionServer().process_spec(commit, None).errors
    _names_parameter_and_fix(key, cls.__name__, errors, words)

    if entry.platform_only is not None:
        MockClient().commit("c", datasets=[cls])  # accepted: the mock runs no such thing
        return
    with pytest.raises(CommitRejected) as e:
        MockClient().commit("c", datasets=[cls])
    _names_parameter_and_fix(key, cls.__name__, e.value.errors, words)


def _names_parameter_and_fix(
    key: str, entity: str, errors: Sequence[Violation], words: str
) -> None:
    hits = [e for e in errors if words in e.message or words in e.fix]
    assert hits, f"{key}: not refused naming {words}: {[str(e) for e in errors]}"
    for e in hits:
        assert e.entity == entity, str(e)
        assert any(w in e.fix for w in ("remove", "drop")), f"{key}: no fix in {e}"
