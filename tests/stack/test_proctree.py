"""The process-tree helpers the benchmarks and tests measure with: a live tree of three
generations is found whole, its CPU counted (a reaped child's too, when asked), its memory
summed."""

from __future__ import annotations

import subprocess
import sys
import time

from fennel_dagster.stack import proctree

# a child that burns ~0.3 s of CPU in a grandchild it reaps, then starts a sleeping one
SCRIPT = """
import subprocess, sys, time
subprocess.run([sys.executable, "-c", "t = __import__('time').process_time()\\nwhile __import__('time').process_time() - t < 0.3: pass"])
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("ready", flush=True)
time.sleep(60)
"""


def test_a_tree_of_three_generations_is_found_and_measured() -> None:
    root = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE)
    try:
        assert root.stdout is not None and root.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 10
        while len(proctree.descendants(root.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        kids = proctree.descendants(root.pid)
        assert len(kids) == 1 and b"time.sleep(60)" in proctree.cmdline(kids[0])
        assert proctree.table()[kids[0]].ppid == root.pid
        assert proctree.tree_cpu(root.pid, reaped=True) >= 0.25
        assert proctree.tree_cpu(root.pid, reaped=False) < proctree.tree_cpu(root.pid) - 0.2
        assert proctree.tree_rss(root.pid) > proctree.tree_rss(kids[0]) > 0
        assert proctree.cmdline(2**22 + 7) == b""
    finally:
        for p in [*proctree.descendants(root.pid), root.pid]:
            subprocess.run(["kill", "-9", str(p)], check=False)
        root.wait(10)
