"""User code ships as canonical source and runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fennel_dagster.dtypes import struct
from fennel_dagster.wire import decode, encode
from fennel_dagster.wire.usercode import UserCodeError, capture, includes, load

RATE = 2.5


def _helper(x: float) -> float:
    return x * RATE


@includes(_helper)
def scale(df: pd.DataFrame) -> pd.Series:  # a comment that must not change the bytes
    return df["a"].map(_helper)


def test_function_source_is_canonical_and_loads_with_its_helpers() -> None:
    code = capture(scale)
    assert code.entrypoint == "scale" and "comment" not in code.source
    assert "RATE = 2.5" in code.preamble and "def _helper" in code.preamble
    fn = load(decode(encode(code)))
    assert fn(pd.DataFrame({"a": [1.0, 2.0]})).tolist() == [2.5, 5.0]


def test_two_lambdas_on_one_line_are_told_apart() -> None:
    pair = (lambda df: df["a"] + 1, lambda df: df["a"] * 10)  # noqa: E731
    first, second = capture(pair[0]), capture(pair[1])
    assert first.source == "lambda df: df['a'] + 1"
    assert second.source == "lambda df: df['a'] * 10"
    assert load(second)(pd.DataFrame({"a": [2]})).tolist() == [20]


def test_closure_values_ship_as_literals_and_unshippable_ones_are_named() -> None:
    rates = {"EUR": 1.0, "USD": 0.9}
    code = capture(lambda df: df["c"].map(rates))
    assert "rates = {'EUR': 1.0, 'USD': 0.9}" in code.preamble
    handle = object()
    with pytest.raises(
        UserCodeError, match="uses 'handle', a object that cannot be shipped as source"
    ):
        capture(lambda df: handle)


def test_captured_code_runs_in_a_fresh_interpreter_without_the_repo_module(tmp_path: Path) -> None:
    payload = tmp_path / "code.json"
    payload.write_bytes(encode(capture(scale)))
    script = (
        "import sys, pandas as pd; from fennel_dagster.wire import decode;"
        "from fennel_dagster.wire.usercode import load;"
        f"fn = load(decode(open({str(payload)!r}, 'rb').read()));"
        "print(fn(pd.DataFrame({'a': [4.0]})).tolist())"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [10.0]


class _Holder:
    # fmt: off
    @staticmethod
    def nested(df: pd.DataFrame) -> pd.Series:
        doubled = df["a"] * 2
    #       a comment at column 0 inside a nested def (Fennel's own tests have one)
        return doubled + 1
    # fmt: on


def test_a_nested_def_with_a_comment_at_column_0_ships_and_runs() -> None:
    code = capture(_Holder.nested)
    assert code.source.startswith("def nested(") and "comment" not in code.source
    fn = load(decode(encode(code)))
    assert fn(pd.DataFrame({"a": [1, 2]})).tolist() == [3, 5]


@struct
class Leg:
    km: int


@struct
class Trip:
    name: str
    legs: list[Leg]


def test_a_struct_the_code_builds_ships_with_it_and_stays_the_same_class_here() -> None:
    """``Trip(...)`` in a lambda: imported where its module imports (values compare equal to
    the user's), else defined from its source, the structs its fields name first."""
    code = capture(lambda n: Trip(name=n, legs=[Leg(km=1)]))
    assert "from tests.declare.test_usercode import Trip" in code.preamble
    assert "class Leg" in code.preamble and "class Trip" in code.preamble
    assert load(code)("x") == Trip(name="x", legs=[Leg(km=1)])  # the same class

    def local() -> Any:
        @struct
        class Stop:
            at: str

        return lambda s: Stop(at=s)

    shipped = capture(local())  # a struct local to a function: its source goes along
    assert "class Stop" in shipped.preamble
    assert load(shipped)("here").at == "here"


def test_a_shipped_struct_runs_where_its_module_does_not_import(tmp_path: Path) -> None:
    payload = tmp_path / "code.json"
    payload.write_bytes(encode(capture(lambda n: Trip(name=n, legs=[Leg(km=2)]))))
    script = (
        "import sys; from fennel_dagster.wire import decode;"
        "from fennel_dagster.wire.usercode import load;"
        f"fn = load(decode(open({str(payload)!r}, 'rb').read()));"
        "print(fn('t'))"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,  # not the repo: no tests
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "Trip(name='t', legs=[Leg(km=2)])"
