"""Validation never crashes: any IR commit, however malformed, gets a list of errors."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.commit.server import DefinitionServer
from fennel_dagster.commit.validate import validate
from fennel_dagster.wire import encode, spec
from tests.wire.strategies import for_class


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(for_class(spec.CommitSpec), for_class(spec.CommitSpec))
def test_validate_returns_errors_instead_of_raising(
    commit: spec.CommitSpec, previous: spec.CommitSpec
) -> None:
    errors = validate(commit, previous)
    assert all(e.entity and e.message and e.fix for e in errors)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(for_class(spec.CommitSpec))
def test_definition_server_handles_any_wire_commit(commit: spec.CommitSpec) -> None:
    result = DefinitionServer().process(encode(commit), None)
    assert (result.errors == ()) or (result.blueprints.blueprints == ())


def _example() -> spec.CommitSpec:
    from examples.payments import DATASETS, FEATURESETS
    from fennel_dagster import commit_spec

    return commit_spec("v1", DATASETS, FEATURESETS)


EXAMPLE = _example()


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_validate_survives_mutations_of_a_valid_commit(data: st.DataObject) -> None:
    """Well-formed but wrong commits reach every semantic rule; none may crash."""
    datasets = list(EXAMPLE.datasets)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(datasets) - 1))
        ds = datasets[i]
        action = data.draw(
            st.sampled_from(["retype", "drop_field", "drop_dataset", "rekey", "bump", "owner"])
        )
        if action == "retype" and ds.fields:
            j = data.draw(st.integers(0, len(ds.fields) - 1))
            new_type = data.draw(
                for_class(spec.IntType) | for_class(spec.OptionalType) | for_class(spec.ListType)
            )
            fields = list(ds.fields)
            fields[j] = dataclasses.replace(fields[j], dtype=new_type)
            datasets[i] = dataclasses.replace(ds, fields=tuple(fields))
        elif action == "drop_field" and ds.fields:
            j = data.draw(st.integers(0, len(ds.fields) - 1))
            datasets[i] = dataclasses.replace(ds, fields=ds.fields[:j] + ds.fields[j + 1 :])
        elif action == "drop_dataset":
            datasets.pop(i)
            if not datasets:
                break
        elif action == "rekey" and ds.fields:
            j = data.draw(st.integers(0, len(ds.fields) - 1))
            fields = list(ds.fields)
            fields[j] = dataclasses.replace(fields[j], key=not fields[j].key)
            datasets[i] = dataclasses.replace(ds, fields=tuple(fields))
        elif action == "bump":
            datasets[i] = dataclasses.replace(
                ds, version=ds.version + data.draw(st.integers(-1, 2))
            )
        elif action == "owner":
            datasets[i] = dataclasses.replace(ds, meta=spec.MetaSpec())
    mutated = dataclasses.replace(EXAMPLE, datasets=tuple(datasets))
    errors = validate(mutated, EXAMPLE)
    assert all(e.entity and e.message and e.fix for e in errors)
