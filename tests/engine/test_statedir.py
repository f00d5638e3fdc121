"""Local state cleanup: what an engine no longer owns goes, what another process has open stays."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from rocksdict import Rdict

from fennel_dagster.engine import statedir

HOLD = """
import sys, time
from rocksdict import Rdict
db = Rdict(sys.argv[1])
db[b"k"] = b"v"
print("open", flush=True)
time.sleep(60)
"""


def _make(path: Path) -> None:
    db = Rdict(str(path))
    db[b"k"] = b"v"
    db.close()


def test_drops_unowned_partitions_and_keeps_owned_and_open_ones(tmp_path: Path) -> None:
    root = tmp_path / "engine-a"
    for job, p in [("kept", 0), ("gone", 0), ("gone", 1), ("busy", 0)]:
        _make(root / job / f"p{p}")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root / "busy" / "p0")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        assert statedir.in_use(root / "busy" / "p0")
        assert not statedir.in_use(root / "gone" / "p0")
        dropped = statedir.drop_unowned(root, lambda job, p: job == "kept", "test")
        assert sorted(p.relative_to(root).as_posix() for p in dropped) == ["gone/p0", "gone/p1"]
        left = [(j, p) for j, p, _ in statedir.partitions(root)]
        assert left == [("busy", 0), ("kept", 0)]
        assert not (root / "gone").exists()  # an emptied job directory goes too
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    assert not statedir.in_use(root / "busy" / "p0")  # the holder died: its lock went with it


def test_a_missing_root_has_nothing_to_drop(tmp_path: Path) -> None:
    assert statedir.partitions(tmp_path / "none") == []
    assert statedir.drop_unowned(tmp_path / "none", lambda j, p: False, "test") == []


def test_cleaners_of_one_root_at_once_all_finish(tmp_path: Path) -> None:
    # engine runs starting together on one host clear the same stale state side by side
    for n in range(300):
        for p in ("p0", "p1"):
            (tmp_path / f"old{n}.job" / p).mkdir(parents=True)
            (tmp_path / f"old{n}.job" / p / "CURRENT").write_text("x")
    (tmp_path / "kept.job" / "p0").mkdir(parents=True)
    errors: list[BaseException] = []

    def clean() -> None:
        try:
            statedir.drop_unowned(tmp_path, lambda job, p: job == "kept.job", "test")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=clean) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.job"]
