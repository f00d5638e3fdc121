"""A port another process holds: `stack up` names it and the fix; `--reassign-busy` frees one."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fennel_dagster import stack
from fennel_dagster.settings import Settings
from fennel_dagster.stack import ports
from fennel_dagster.stack.process import StackError


@pytest.fixture
def held() -> Iterator[int]:
    """A port a foreign process (here: this test) listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def held_before_a_free_one() -> Iterator[int]:
    """A held port whose next one up is free when the test starts (an ephemeral port can be
    any other process's: the next one is looked for, not assumed)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            if ports.bindable("127.0.0.1", port + 1):
                yield port
                return
    raise AssertionError("no held port with a free one next to it in 100 tries")


def _free() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settings(tmp_path: Path, **chosen: int) -> Settings:
    """Every port free (so the environment's stack never shows up) except those ``chosen``."""
    every = {f: _free() for fields in ports.SERVICE_PORTS.values() for f in fields}
    return Settings(home=tmp_path / "home", host="127.0.0.1", **{**every, **chosen})


def test_up_refuses_a_port_held_by_another_process_and_names_the_variable(
    tmp_path: Path, held: int
) -> None:
    s = _settings(tmp_path, s3_port=held)
    with pytest.raises(StackError) as e:
        stack.up(s, ["s3"])
    msg = str(e.value)
    assert f"s3: port {held} (FENNEL_S3_PORT) is held by another process" in msg
    assert "--reassign-busy" in msg


def test_reassign_busy_moves_only_defaults_held_elsewhere_upward(
    tmp_path: Path, held_before_a_free_one: int
) -> None:
    held = held_before_a_free_one
    s = _settings(tmp_path, kafka_port=held, kafka_controller_port=held + 1, pg_port=held)
    out = ports.reassign_busy(s, explicit=set())
    assert set(out) == {"FENNEL_KAFKA_PORT", "FENNEL_PG_PORT"}
    # upward from the old port, never onto another of the stack's ports or each other
    assert all(n > held for n in out.values())
    assert held + 1 not in out.values()
    assert len(set(out.values())) == 2
    assert all(ports.bindable(s.host, n) for n in out.values())
    # a port the user chose (argument, variable, settings file) is theirs to resolve
    assert ports.reassign_busy(s).keys() == set()
    assert ports.reassign_busy(s, explicit={"kafka_port"}).keys() == {"FENNEL_PG_PORT"}
    # and a service this stack runs holds its own ports
    assert ports.reassign_busy(s, ours={"postgres"}, explicit=set()).keys() == {"FENNEL_KAFKA_PORT"}


@pytest.mark.services
def test_cli_leaves_the_running_stack_and_chosen_ports_alone(
    live_stack: Settings, held: int
) -> None:
    cli = Path(sys.executable).with_name("fennel-dagster")
    env = {**os.environ, **live_stack.as_env(), "FENNEL_S3_PORT": str(held)}
    out = subprocess.run(
        [str(cli), "stack", "ports", "--reassign-busy"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    lines = out.splitlines()
    assert all(re.fullmatch(r"export FENNEL_[A-Z_]+_PORT=\d+", line) for line in lines), out
    assert "FENNEL_S3_PORT" not in out
    # the live stack's daemons are ours: their ports are never handed elsewhere, even when
    # taken for defaults nobody chose
    assert {"postgres", "kafka", "s3", "registry"} <= stack.running(live_stack)
    moved = ports.reassign_busy(live_stack, stack.running(live_stack), explicit=set())
    assert not moved.keys() & {"FENNEL_PG_PORT", "FENNEL_KAFKA_PORT", "FENNEL_S3_PORT"}
    listing = subprocess.run(
        [str(cli), "stack", "ports"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert re.search(rf"s3 +{held} +FENNEL_S3_PORT +in use", listing), listing
    assert re.search(r"kafka +\d+ +FENNEL_KAFKA_PORT +in use by this stack", listing), listing
