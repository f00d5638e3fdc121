"""Random sequences of commits, version bumps, clones and deletes across branches keep every
invariant after every step (hypothesis stateful testing against the real services)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from fennel_dagster.client import LocalClient
from fennel_dagster.commit.errors import CommitRejected
from fennel_dagster.metadata.db import connect
from tests.commit_protocol.invariants import assert_invariants
from tests.commit_protocol.scenario import GRAPHS, settings_for

pytestmark = pytest.mark.services


class BranchesMachine(RuleBasedStateMachine):
    branches = Bundle("branches")

    @initialize(target=branches)
    def start(self) -> str:
        self.schema = f"t{uuid.uuid4().hex[:10]}"
        self.client = LocalClient(settings_for(self.schema))
        self.model: dict[str, str | None] = {"main": None}
        return "main"

    @rule(branch=branches, graph=st.sampled_from(sorted(GRAPHS)))
    def commit(self, branch: str, graph: str) -> None:
        if branch not in self.model:
            return
        try:
            self.client.commit(f"{graph} on {branch}", GRAPHS[graph](), branch=branch)
            self.model[branch] = graph
        except CommitRejected as e:  # e.g. a version going down: rejected whole, nothing changes
            assert all(err.fix for err in e.errors)

    @rule(target=branches, source=branches)
    def clone(self, source: str) -> str:
        if source not in self.model:
            return source
        name = f"b{len(self.model)}_{uuid.uuid4().hex[:4]}"
        self.client.clone_branch(name, from_branch=source)
        self.model[name] = self.model[source]
        return name

    @rule(branch=branches)
    def delete(self, branch: str) -> None:
        if branch == "main" or branch not in self.model:
            return
        self.client.delete_branch(branch)
        del self.model[branch]

    @invariant()
    def invariants_hold(self) -> None:
        if not hasattr(self, "client"):
            return
        assert_invariants(self.client)
        assert set(self.client.list_branches()) == set(self.model)
        for branch, graph in self.model.items():
            committed = self.client.checkout(branch)
            names = {d.name for d in committed.datasets} if committed else set()
            expected = {d.__name__ for d in GRAPHS[graph]()} if graph else set()
            assert names == expected

    def teardown(self) -> None:
        if not hasattr(self, "client"):
            return
        for branch in self.client.list_branches():
            self.client.delete_branch(branch, even_main=True)
        self.client.close()
        with connect(settings_for(self.schema)) as conn:
            conn.execute(f"DROP SCHEMA {self.schema} CASCADE")
            conn.commit()


BranchesMachine.TestCase.settings = settings(
    max_examples=8, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
)
test_random_branch_histories_keep_the_invariants = BranchesMachine.TestCase
