"""A runner beats from a thread through a slow start and a long batch, and stops beating
when its loop is stuck (no stack needed)."""

from __future__ import annotations

import threading
import time

from fennel_dagster.engine.runner import beating_beside_loop


def test_a_slow_start_and_a_long_batch_keep_beating_and_a_stuck_loop_stops() -> None:
    beats: list[str] = []  # "loop" or "alive", in order

    def beat() -> None:
        beats.append("loop")

    def alive() -> None:
        assert threading.current_thread().name == "background-beats"
        beats.append("alive")

    with beating_beside_loop(beat, alive, every_s=0.1, stalled_after_s=1.0) as loop_beat:
        time.sleep(0.55)  # a snapshot download, a replay: no loop yet
        started = len(beats)
        loop_beat()
        time.sleep(0.6)  # one long batch, well inside the bound
        during = beats[started + 1 :]
        time.sleep(1.5)  # the loop is stuck past the bound
        count = len(beats)
        time.sleep(0.5)
        stuck = beats[count:]
    assert started >= 4 and set(beats[:started]) == {"alive"}
    assert beats[started] == "loop"
    assert len(during) >= 3 and set(during) == {"alive"}  # the batch does not look like death
    assert stuck == []  # past the bound, nothing beats for the loop: its lease lapses
