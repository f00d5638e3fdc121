"""Daemons of the local stack: started detached, tracked by PID file, stopped by PID.

A PID file alone is not proof of ownership (PIDs are reused), so every check also matches
the process's command line against a marker unique to our data directory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fennel_dagster.errors import StackFailed


class StackError(StackFailed, RuntimeError):
    """A service of the local stack could not be prepared, started, or reached."""


@dataclass(frozen=True)
class Daemon:
    """One background process of ours, known by its PID file and command-line marker."""

    name: str
    pid_file: Path
    log_file: Path
    marker: str  # a string our process's command line must contain

    def pid(self) -> int | None:
        """The PID of our live process, or None (stale PID files are removed)."""
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        if _cmdline_contains(pid, self.marker):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def start(
        self, argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> int:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                cwd=cwd,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> bool:
        """Stop our process (``sig``, then SIGKILL after ``timeout``); True if one was running."""
        pid = self.pid()
        if pid is None:
            return False
        _signal(pid, sig)
        if not wait_for(lambda: not _alive(pid), timeout):
            _signal(pid, signal.SIGKILL)
            wait_for(lambda: not _alive(pid), 5.0)
        self.pid_file.unlink(missing_ok=True)
        return True


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _cmdline_contains(pid: int, marker: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return _alive(pid) and marker in cmdline


def wait_for(check: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return True
        except Exception:  # noqa: BLE001 - a service that is still starting may raise anything
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no log at {path})"
