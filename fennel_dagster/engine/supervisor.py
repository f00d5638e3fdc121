"""Supervisor: one per engine; keeps the runners of the partitions this engine owns alive.

Every ``engine_poll_interval_s`` it renews the engine's lease in Postgres, reads the live
engines and the job registry, and assigns each job partition to one live engine by
rendezvous hashing. It starts a runner *process* for each partition it now owns (processes,
so two engines — or one engine's runners — use every core; offline and sink writers share
one, several to a process, and so may stream partitions of small jobs: ``sharing``; a source
partition it owns with its pipeline's runs fused with it: ``chaining``), stops runners of
partitions it no longer owns or
whose job was removed, and restarts runners that died. When an engine
dies, its lease expires and the survivors' next poll hands its partitions over; Kafka
fencing makes the hand-over safe even if the old runner is still alive.
Runners fork from a fork server with the engine loaded (``forking``).

Stopping a runner never holds up the poll: it is told (SIGTERM, or over its process's pipe)
and left to wind down while the poll goes on heartbeating and starting runners; a reaper
thread joins it once it has exited, or escalates after ``STOP_GRACE_S`` (SIGTERM, then
SIGKILL: exactly-once holds under it). A partition still winding down here is not started
again until its old runner has exited (they would share its state directory).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import psycopg
from tenacity import Retrying, retry_if_exception_type, stop_when_event_set, wait_exponential

from fennel_dagster.engine import chaining, metrics, sharing
from fennel_dagster.engine.forking import become_runner, runner_context, start_server
from fennel_dagster.engine.lookup_server import Followers, serve
from fennel_dagster.engine.outage import Outage
from fennel_dagster.engine.rocks_tuning import RocksTuning
from fennel_dagster.engine.runner import run_forever, state_path
from fennel_dagster.engine.statedir import drop_unowned
from fennel_dagster.heap import collect_less_often, freeze_startup_heap
from fennel_dagster.metadata import registry, tokens
from fennel_dagster.metadata.db import connect
from fennel_dagster.metadata.migrate import migrate
from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.settings import Settings

log = logging.getLogger("fennel_dagster.engine.supervisor")

Key = sharing.Key
Group = sharing.Group

# how long a runner told to stop may wind down (a last snapshot, an open transaction ended)
# before it is sent SIGTERM (a shared process told over its pipe) and then SIGKILL
STOP_GRACE_S = 30.0
REAP_EVERY_S = 0.2  # how often the reaper looks at the runners winding down


def _runner_main(
    settings: Settings,
    members: list[tuple[str, int]],
    owner: str,
    parent: int = 0,
    metrics_dir: str = "",
    environ: dict[str, str] | None = None,
    control: Connection | None = None,
    chained: list[tuple[Key, Key]] | None = None,
) -> None:
    become_runner(parent, environ)
    if metrics_dir:
        metrics.use_directory(Path(metrics_dir))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    freeze_startup_heap()
    collect_less_often()
    jobs = [(JobRow.from_json(job_json), partition) for job_json, partition in members]
    if len(jobs) == 1:
        run_forever(settings, *jobs[0], owner, stop)
    else:
        pairs = [((s[0], s[1]), (p[0], p[1])) for s, p in chained or []]
        sharing.run_together(settings, jobs, owner, stop, control, pairs)


@dataclass
class _Running:
    job: JobRow
    partition: int
    process: BaseProcess
    started: float
    restarts: int = 0
    group: Group = ()  # the partitions its process runs (this one among them)
    control: Connection | None = None  # a shared process's pipe (sharing.run_together)
    chained: tuple[tuple[Key, Key], ...] = ()  # the (source, pipeline) chains of its process


@dataclass
class _Stopping:
    """A runner process told to stop, until it has exited and been joined."""

    process: BaseProcess
    names: str
    keys: frozenset[Key]
    control: Connection | None
    term_at: float  # when to send SIGTERM (now: already sent; a shared process: after grace)
    kill_at: float  # when to send SIGKILL
    termed: bool = False
    killed: bool = False


@dataclass
class Supervisor:
    settings: Settings
    engine_id: str = field(default_factory=lambda: f"engine-{uuid.uuid4().hex[:8]}")
    address: str = ""
    runners: dict[Key, _Running] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    # runner processes told to stop (or whose members all left): joined once they exit
    _stopping: list[_Stopping] = field(default_factory=list)
    # pipeline partition -> the source partition it runs chained with (``chaining``)
    chains: dict[Key, Key] = field(default_factory=dict)
    # source partitions whose chain ended on its own: they run alone from then on
    unchained: set[Key] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._ctx = runner_context()
        start_server(self._ctx)
        self._stop = threading.Event()
        self.outage = Outage(self.engine_id, "Postgres", log)
        self._conn = connect(self.settings, self.settings.pg_schema, autocommit=True)
        migrate(self._conn)
        self.metrics_dir = self.settings.state_path / ".metrics" / self.engine_id
        metrics.reset_directory(self.metrics_dir)
        self._stopping_lock = threading.Lock()
        self._reaper = threading.Thread(target=self._reap_until_stopped, name="runner-reaper",
                                        daemon=True)  # fmt: skip
        self._reaper.start()

    def _reconnect(self, error: Exception) -> None:
        """Postgres went away: say so once, then reconnect with backoff (until ``stop``).

        The runners are processes of their own and keep processing meanwhile; this engine's
        lease lapses, so other engines may take its partitions — Kafka fencing keeps that
        safe — and the next poll after reconnecting recomputes what it owns."""
        self.outage.begin(error, "runners keep processing; reconnecting with backoff")
        with contextlib.suppress(Exception):
            self._conn.close()
        retrying = Retrying(
            retry=retry_if_exception_type(psycopg.OperationalError),
            wait=wait_exponential(multiplier=0.5, max=10.0),
            stop=stop_when_event_set(self._stop),
            sleep=lambda seconds: None if self._stop.wait(seconds) else None,
            reraise=True,
        )
        self._conn = retrying(connect, self.settings, self.settings.pg_schema, autocommit=True)

    # ------------------------------------------------------------------ one poll

    def owned(
        self, jobs: list[JobRow], engines: list[str], failed: set[Key] | None = None
    ) -> dict[Key, JobRow]:
        """The partitions this engine should run: its rendezvous share, less the ones that
        stopped for good (their reason is in the registry; a new commit replaces the job). A
        pipeline partition a source's would fuse with goes where the source's goes, so that
        every engine can run its chains."""
        out: dict[Key, JobRow] = {}
        follows = chaining.followed(jobs) if self.settings.engine_fuse_sources else {}
        for job in jobs:
            for p in range(job.partitions):
                by = follows.get(job.hash, job.hash)
                if registry.rendezvous_owner(by, p, engines) != self.engine_id:
                    continue
                if failed and (job.hash, p) in failed:
                    self._skip(job, p)
                    continue
                out[(job.hash, p)] = job
        return out

    def _skip(self, job: JobRow, partition: int) -> None:
        key = f"{job.name}.p{partition}"
        if key not in self.skipped:
            log.warning("engine %s: not running %s: it failed permanently (see job_failures)",
                        self.engine_id, key)  # fmt: skip
            self.skipped[key] = job.hash

    def poll(self) -> None:
        registry.heartbeat_engine(
            self._conn, self.engine_id, self.address, self.settings.engine_lease_s
        )
        # "run:<id>" rows are Dagster engine runs' lookup endpoints, not engines that own work
        engines = [e.id for e in registry.live_engines(self._conn) if not e.id.startswith("run:")]
        if self.engine_id not in engines:
            engines.append(self.engine_id)
        failed = set(registry.failures(self._conn))
        jobs = registry.list_jobs(self._conn)
        want = self.owned(jobs, engines, failed)
        self._hear_ended()
        self.chains = (
            {p: s for p, s in chaining.chains(want, jobs).items() if s not in self.unchained}
            if self.settings.engine_fuse_sources
            else {}
        )
        streams = sharing.streams_per_process(
            self.settings.engine_streams_per_process, want, len(os.sched_getaffinity(0)),
            len(self.chains),
        )  # fmt: skip
        groups = sharing.plan_groups(
            want, self.groups(), self.settings.engine_writers_per_process, streams, self.chains
        )
        keep = set(groups)
        gone = []
        for group in self.groups():
            rest = tuple(k for k in group if k in want)
            if group in keep:
                continue
            if rest in keep:  # some members leave a shared process; the others run on
                self._release(group, rest)
            else:
                gone.append(group)
        for group in gone:  # told, not waited for: each winds down while the poll goes on
            self._stop_runner(group)
        self._drop_state({(job.name, p) for (_, p), job in want.items()})
        winding = self.winding_down()
        for group in groups:
            cur = self.runners.get(group[0])
            if cur is None:
                if winding & set(group):  # its old runner still holds the state: next poll
                    continue
                self._start(group, want)
            elif not cur.process.is_alive():
                if cur.process.pid:
                    metrics.runner_exited(self.metrics_dir, cur.process.pid)
                log.warning("engine %s: runner %s exited (%s); restarting", self.engine_id,
                            self._names(group), cur.process.exitcode)  # fmt: skip
                if cur.control is not None:
                    cur.control.close()
                self._start(group, want, cur.restarts + 1)

    def groups(self) -> list[Group]:
        """The process groups running now, one entry each."""
        return list(dict.fromkeys(r.group for r in self.runners.values()))

    def _hear_ended(self) -> None:
        """Members of shared processes that ended on their own leave their groups (if still
        wanted, they are started anew, in a process of their own)."""
        for group in self.groups():
            run = self.runners[group[0]]
            ended: list[Key] = []
            with contextlib.suppress(EOFError, OSError):
                while run.control is not None and run.control.poll():
                    verb, key = run.control.recv()
                    if verb == "ended" and tuple(key) in group:
                        ended.append(tuple(key))
            if ended:
                log.info("engine %s: %s ended on its own", self.engine_id,
                         ", ".join(f"{self.runners[k].job.name} p{k[1]}" for k in ended))  # fmt: skip
                self.unchained |= {s for s, p in run.chained if s in ended or p in ended}
                self._leave(group, ended)

    def _release(self, group: Group, rest: Group) -> None:
        """Tell a shared process to stop the members of ``group`` not in ``rest``."""
        leaving = [k for k in group if k not in rest]
        run = self.runners[group[0]]
        if run.control is not None:
            with contextlib.suppress(OSError):
                run.control.send(("stop", leaving))
        log.info("engine %s: stopping %s; the rest of its process runs on", self.engine_id,
                 ", ".join(f"{self.runners[k].job.name} p{k[1]}" for k in leaving))  # fmt: skip
        self._leave(group, leaving)

    def _leave(self, group: Group, leaving: list[Key]) -> None:
        rest = tuple(k for k in group if k not in leaving)
        run = self.runners[group[0]]
        process = run.process
        names = self._names(group)
        for k in leaving:
            del self.runners[k]
        for k in rest:
            self.runners[k].group = rest
        if not rest:  # it ends by itself, its members all gone; escalated if it does not
            now = time.monotonic()
            self._wind_down(_Stopping(process, names, frozenset(group), run.control,
                                      now + STOP_GRACE_S, now + 2 * STOP_GRACE_S))  # fmt: skip

    def winding_down(self) -> set[Key]:
        """The partitions whose runners were told to stop and have not exited yet."""
        with self._stopping_lock:
            return {k for st in self._stopping for k in st.keys}

    def _wind_down(self, st: _Stopping) -> None:
        with self._stopping_lock:
            self._stopping.append(st)

    def _reap_until_stopped(self) -> None:
        while not self._stop.wait(REAP_EVERY_S):
            try:
                self.reap()
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("engine %s: reaping runners failed", self.engine_id)

    def reap(self) -> None:
        """Join the runners told to stop that have exited; signal the ones past their grace
        (SIGTERM, then SIGKILL). Never waits on a process."""
        now = time.monotonic()
        with self._stopping_lock:
            stopping = list(self._stopping)
        for st in stopping:
            proc = st.process
            if not proc.is_alive():
                proc.join(0)
                if proc.pid:
                    metrics.runner_exited(self.metrics_dir, proc.pid)
                if st.control is not None:
                    with contextlib.suppress(OSError):
                        st.control.close()
                with self._stopping_lock:
                    self._stopping.remove(st)
                log.info("engine %s: stopped %s%s", self.engine_id, st.names,
                         " (killed)" if st.killed else "")  # fmt: skip
            elif now >= st.kill_at and not st.killed:
                log.warning("engine %s: %s did not stop within %.0fs; killing it",
                            self.engine_id, st.names, now - st.kill_at + STOP_GRACE_S)  # fmt: skip
                proc.kill()
                st.killed = True
            elif now >= st.term_at and not st.termed:
                _terminate(proc)
                st.termed = True

    def _names(self, group: Group) -> str:
        return ", ".join(f"{self.runners[k].job.name} p{k[1]}" for k in group)

    def _drop_state(self, owned: set[tuple[str, int]]) -> None:
        drop_unowned(self.settings.state_path / self.engine_id,
                     lambda job, p: (job, p) in owned, f"engine {self.engine_id}")  # fmt: skip

    def _start(self, group: Group, want: dict[Key, JobRow], restarts: int = 0) -> None:
        first = want[group[0]]
        chained = tuple(sharing.chained_in(group, self.chains))
        control, theirs = self._ctx.Pipe() if len(group) > 1 else (None, None)
        proc = self._ctx.Process(
            target=_runner_main,
            args=(
                self.settings,
                [(want[k].to_json(), k[1]) for k in group],
                self.engine_id,
                os.getpid(),
                str(self.metrics_dir),
                dict(os.environ),
                theirs,
                [list(pair) for pair in chained],
            ),  # fmt: skip
            name=f"runner-{first.name}-p{group[0][1]}"
            + (f"-and-{len(group) - 1}" if len(group) > 1 else ""),
            daemon=False,
        )
        proc.start()
        if theirs is not None:
            theirs.close()  # the child's end, now in the child
        now = time.monotonic()
        for k in group:
            self.runners[k] = _Running(want[k], k[1], proc, now, restarts, group, control, chained)
        log.info("engine %s: started %s (pid %s)%s", self.engine_id, self._names(group), proc.pid,
                 "".join(f"; {self.runners[s].job.name} p{s[1]} chained with "
                         f"{self.runners[p].job.name}" for s, p in chained))  # fmt: skip

    def _stop_runner(self, group: Group) -> None:
        """Tell the group's process to stop (SIGTERM) and leave it to the reaper."""
        names = self._names(group)
        run = self.runners[group[0]]
        for k in group:
            del self.runners[k]
        _terminate(run.process)
        now = time.monotonic()
        self._wind_down(_Stopping(run.process, names, frozenset(group), run.control, now,
                                  now + STOP_GRACE_S, termed=True))  # fmt: skip
        log.info("engine %s: stopping %s", self.engine_id, names)

    # ------------------------------------------------------------------ lifecycle

    def start_lookups(self) -> None:
        """Serve lookups of owned partitions; the address goes into the engines table."""

        def owned(job_hash: str, partition: int) -> JobRow | None:
            run = self.runners.get((job_hash, partition))
            return run.job if run is not None else None

        self.followers = Followers(
            lambda j, p: state_path(self.settings, self.engine_id, j.name, p),
            RocksTuning.of(self.settings),
        )
        secret = tokens.service_secret(self._conn)
        self.server = serve(
            self.settings.host, self.settings.engine_port, owned, self.followers, secret,
            self.metrics_dir,
        )  # fmt: skip
        self.address = f"{self.settings.host}:{self.server.server_address[1]}"
        freeze_startup_heap()  # this process answers lookups from now on

    def serve(self) -> None:
        """Poll until ``stop()`` (or SIGTERM/SIGINT in the CLI), then stop every runner."""
        if not self.address:
            self.start_lookups()
        try:
            while not self._stop.is_set():
                try:
                    self.poll()
                    if (over := self.outage.end()) is not None:
                        registry.record_outage(self._conn, over)
                except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                    self._reconnect(e)
                    continue
                except Exception:  # noqa: BLE001 - one bad poll must not kill the engine
                    log.exception("engine %s: poll failed", self.engine_id)
                self._stop.wait(self.settings.engine_poll_interval_s)
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> None:
        """Stop every runner (all told at once) and wait for them, SIGKILLing any still
        running after ``STOP_GRACE_S``."""
        self._stop.set()  # the reaper ends; this thread reaps from here on
        self._reaper.join(10)
        for group in self.groups():
            self._stop_runner(group)
        with self._stopping_lock:
            for st in self._stopping:  # shared processes ending on their own: told too
                if not st.termed:
                    _terminate(st.process)
                    st.termed = True
                st.kill_at = min(st.kill_at, time.monotonic() + STOP_GRACE_S)
        deadline = time.monotonic() + STOP_GRACE_S + 10  # killed ones exit in a moment
        while time.monotonic() < deadline:
            self.reap()
            with self._stopping_lock:
                if not self._stopping:
                    break
            time.sleep(REAP_EVERY_S)
        if getattr(self, "server", None) is not None:
            self.server.shutdown()
        try:
            registry.deregister_engine(self._conn, self.engine_id)
        except psycopg.Error as e:  # its lease lapses on its own
            log.warning("engine %s: could not deregister (%s)", self.engine_id, e)
        finally:
            self._conn.close()


def _terminate(process: BaseProcess) -> None:
    if process.is_alive() and process.pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
