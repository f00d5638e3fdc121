"""A starting runner beats from a thread until its loop beats itself (no stack needed)."""

from __future__ import annotations

import threading
import time

from fennel_dagster.engine.runner import beating_until_loop


def test_a_slow_start_keeps_beating_and_the_loop_takes_over() -> None:
    beats: list[str] = []

    def beat() -> None:
        beats.append(threading.current_thread().name)

    with beating_until_loop(beat, every_s=0.1) as loop_beat:
        time.sleep(0.55)  # a snapshot download, a replay: no loop yet
        started = len(beats)
        loop_beat()
        time.sleep(0.3)
        after = len(beats)
    assert started >= 4 and set(beats[:started]) == {"startup-beats"}
    assert after == started + 1 and beats[-1] == threading.current_thread().name
