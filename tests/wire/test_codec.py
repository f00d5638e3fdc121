"""Every IR entity survives encode/decode, and equal declarations have equal bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fennel_dagster.wire import WireError, content_hash, decode, encode, spec
from tests.wire.strategies import ENTITY_KINDS, for_class

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cls", ENTITY_KINDS, ids=lambda c: c.__name__)
def test_every_entity_kind_round_trips_through_the_wire(cls: type) -> None:
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(for_class(cls))
    def round_trip(value: object) -> None:
        data = encode(value)
        assert decode(data) == value
        assert encode(decode(data)) == data  # canonical: re-encoding gives the same bytes

    round_trip()


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_commits_round_trip_with_their_datasets_and_featuresets(data: st.DataObject) -> None:
    commit = data.draw(for_class(spec.CommitSpec))
    assert decode(encode(commit)) == commit


def test_the_same_declarations_give_the_same_bytes_in_fresh_interpreters() -> None:
    code = (
        "from examples.payments import DATASETS, FEATURESETS;"
        "from fennel_dagster import commit_spec; from fennel_dagster.wire import content_hash;"
        "print(content_hash(commit_spec('v1', DATASETS, FEATURESETS)))"
    )
    digests = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_golden_hash_of_a_fixed_dataset_pins_the_wire_format() -> None:
    ds = spec.DatasetSpec(
        name="UserSpend",
        version=2,
        fields=(
            spec.FieldSpec("uid", spec.IntType(), key=True),
            spec.FieldSpec("spend", spec.OptionalType(spec.FloatType())),
            spec.FieldSpec("ts", spec.TimestampType(), timestamp=True),
        ),
        meta=spec.MetaSpec(owner="a@b.c"),
        index=True,
    )
    assert content_hash(ds) == GOLDEN_USERSPEND


GOLDEN_USERSPEND = "a7449c061ab3251e736bee2358217511c464fd122684b51847873fcfab1eaaec"


def test_decoding_other_wire_versions_fails_with_the_fix() -> None:
    with pytest.raises(
        WireError, match=r"wire version 99 is not supported .* upgrade the client or the server"
    ):
        decode(b'{"wire_version":99,"value":null}')
    with pytest.raises(WireError, match="unknown IR tag 'Nope'"):
        decode(b'{"wire_version":1,"value":{"@":"Nope"}}')
    with pytest.raises(WireError, match="not a fennel_dagster wire document"):
        decode(b"\xff\x00garbage")
