"""The invariants the commit protocol must keep after any crash and recovery."""

from __future__ import annotations

import time

from fennel_dagster.client import LocalClient
from fennel_dagster.engine import statedir


def assert_invariants(client: LocalClient, state_dir: bool = True) -> None:
    """``state_dir=False``: a test keeps a deleted job's local state on purpose."""
    conn = client.conn
    with conn.transaction():
        referenced = {
            name: kind for kind, name in conn.execute(
                "SELECT DISTINCT a.kind, a.name FROM refs r JOIN assets a USING (hash)"
            )
        }  # fmt: skip
        bad_states = conn.execute(
            "SELECT a.name, a.state FROM refs r JOIN assets a USING (hash) WHERE a.state <> 'live'"
        ).fetchall()
        orphans_live = conn.execute(
            "SELECT name FROM assets a WHERE state = 'live' AND NOT EXISTS (SELECT 1 FROM refs r WHERE r.hash = a.hash)"
        ).fetchall()
        leftovers = conn.execute(
            "SELECT state, count(*) FROM assets WHERE state IN ('creating', 'destroying') GROUP BY state"
        ).fetchall()
        open_attempts = conn.execute(
            "SELECT count(*) FROM commit_attempts WHERE state = 'open'"
        ).fetchone()
        heads = conn.execute(
            "SELECT b.name, c.hashes FROM branches b JOIN commits c ON c.id = b.head"
        ).fetchall()
        refs_by_branch: dict[str, set[str]] = {}
        for branch, h in conn.execute("SELECT branch, hash FROM refs"):
            refs_by_branch.setdefault(branch, set()).add(h)
        jobs = {r[0] for r in conn.execute("SELECT name FROM jobs")}
    assert bad_states == [], f"referenced assets not live: {bad_states}"
    assert orphans_live == [], f"live assets nobody references: {orphans_live}"
    assert leftovers == [] and open_attempts == (0,), (
        f"unfinished work after recovery: {leftovers} {open_attempts}"
    )
    # the set of Kafka topics of the platform equals the topic assets with a positive ref count;
    # a listing can lag the broker's last create/delete by a moment, so wait for it to settle
    wanted = {n for n, k in referenced.items() if k == "topic"}
    deadline = time.monotonic() + 10
    while (
        topics := client.physical.topics(f"{client.settings.namespace}.")
    ) != wanted and time.monotonic() < deadline:
        time.sleep(0.25)
    assert topics == wanted, (
        f"stray topics {sorted(topics - wanted)}, missing topics {sorted(wanted - topics)}"
    )
    # object-store prefixes likewise
    markers = {m.removesuffix(".fennel-asset") for m in client.physical.prefixes()}
    want_prefixes = {f"{client.settings.namespace}/" + p for p in _prefix_specs(client, referenced)}
    assert markers == want_prefixes, (
        f"stray {sorted(markers - want_prefixes)}, missing {sorted(want_prefixes - markers)}"
    )
    # and no object outlives its prefix (snapshots, Delta files): a destroy deletes them all
    strays = client.physical.stray_objects(want_prefixes)
    assert not strays, f"objects under released prefixes: {strays[:5]} ({len(strays)})"
    # every branch shows exactly its head commit's graph: never a mix
    for branch, hashes in heads:
        assert set(hashes) == refs_by_branch.get(branch, set()), (
            f"branch {branch} refs differ from its head"
        )
    # the job registry holds exactly the referenced jobs
    assert jobs == {n for n, k in referenced.items() if k == "job"}
    # and local state exists only for them: engines drop the rest on their next poll (a test
    # with an engine has a state directory of its own; the default one is shared)
    if state_dir and client.settings.state_dir is not None:
        deadline = time.monotonic() + 20
        while (stale := _stale_state(client, jobs)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not stale, f"local state of jobs not in the registry: {stale[:5]} ({len(stale)})"


def _stale_state(client: LocalClient, jobs: set[str]) -> list[str]:
    root = client.settings.state_path
    engines = [e for e in root.iterdir() if e.is_dir()] if root.is_dir() else []
    return [str(path.relative_to(root)) for e in engines
            for job, _, path in statedir.partitions(e) if job not in jobs]  # fmt: skip


def _prefix_specs(client: LocalClient, referenced: dict[str, str]) -> set[str]:
    with client.conn.transaction():
        rows = client.conn.execute(
            "SELECT DISTINCT a.spec->>'bucket_prefix' FROM refs r JOIN assets a USING (hash) "
            "WHERE a.kind IN ('snapshot_prefix', 'offline_table')"
        ).fetchall()
    return {r[0] for r in rows}


def topics_of_head(client: LocalClient, branch: str) -> set[str]:
    with client.conn.transaction():
        rows = client.conn.execute(
            "SELECT a.name FROM branches b JOIN commits c ON c.id = b.head JOIN assets a ON a.hash = ANY(c.hashes) "
            "WHERE b.name = %s AND a.kind = 'topic'",
            (branch,),
        ).fetchall()
    return {r[0] for r in rows}
