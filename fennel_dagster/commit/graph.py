"""The entity graph of a commit: entities as nodes, reads/writes/lookups as edges.

Nodes are named ``kind:name`` (``dataset:UserSpend``, ``pipeline:UserSpend.agg``,
``source:Transaction#0``, ``featureset:User``, ``feature:User.spend_7d``,
``extractor:User.from_spend``, ``index:UserSpend``); edges carry their relation
(``reads``, ``writes``, ``feeds``, ``looks_up``, ``derives``, ``has``, ``indexes``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from fennel_dagster.wire import spec


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    relation: str


@dataclass
class EntityGraph:
    datasets: dict[str, spec.DatasetSpec]
    featuresets: dict[str, spec.FeaturesetSpec]
    nodes: set[str] = field(default_factory=set)
    edges: list[Edge] = field(default_factory=list)
    incremental: bool = False

    @classmethod
    def build(cls, commit: spec.CommitSpec, base: spec.CommitSpec | None = None) -> EntityGraph:
        """The graph of ``commit``; for an incremental commit, ``base``'s entities fill in."""
        datasets = {d.name: d for d in (base.datasets if base else ())}
        featuresets = {f.name: f for f in (base.featuresets if base else ())}
        datasets.update({d.name: d for d in commit.datasets})
        featuresets.update({f.name: f for f in commit.featuresets})
        g = cls(datasets, featuresets, incremental=commit.incremental)
        g._link()
        return g

    def _add(self, src: str, dst: str, relation: str) -> None:
        self.nodes.update((src, dst))
        self.edges.append(Edge(src, dst, relation))

    def _link(self) -> None:
        for ds in self.datasets.values():
            d = f"dataset:{ds.name}"
            self.nodes.add(d)
            if ds.keys and ds.index:
                self._add(d, f"index:{ds.name}", "indexes")
            for i, _ in enumerate(ds.sources):
                self._add(f"source:{ds.name}#{i}", d, "writes")
            for p in ds.pipelines:
                pn = f"pipeline:{ds.name}.{p.name}"
                for name in p.inputs:
                    self._add(f"dataset:{name}", pn, "feeds")
                for node in p.nodes:
                    if isinstance(node, spec.JoinNode):
                        self._add(f"dataset:{node.right}", pn, "looks_up")
                self._add(pn, d, "writes")
        for fs in self.featuresets.values():
            fn = f"featureset:{fs.name}"
            self.nodes.add(fn)
            for f in fs.features:
                self._add(fn, f"feature:{fs.name}.{f.name}", "has")
            for ex in fs.extractors:
                en = f"extractor:{fs.name}.{ex.name}"
                for feature in ex.inputs:
                    self._add(f"feature:{feature}", en, "reads")
                for o in ex.outputs:
                    self._add(en, f"feature:{fs.name}.{o}", "derives")
                for dep in ex.deps:
                    self._add(f"dataset:{dep}", en, "looks_up")

    def inputs_of(self, dataset: str) -> list[str]:
        ds = self.datasets[dataset]
        names = {n for p in ds.pipelines for n in p.inputs}
        names |= {
            node.right for p in ds.pipelines for node in p.nodes if isinstance(node, spec.JoinNode)
        }
        return sorted(names)

    def downstream(self, dataset: str) -> list[str]:
        """Every dataset computed, directly or not, from ``dataset`` (topological order)."""
        out: list[str] = []
        frontier = [dataset]
        while frontier:
            cur = frontier.pop(0)
            for ds in sorted(self.datasets.values(), key=lambda d: d.name):
                if ds.name not in out and cur in self.inputs_of(ds.name):
                    out.append(ds.name)
                    frontier.append(ds.name)
        return out

    def topological(self) -> Iterator[spec.DatasetSpec]:
        """Datasets with every input before its readers."""
        done: set[str] = set()
        pending = sorted(self.datasets)
        while pending:
            ready = [
                n
                for n in pending
                if all(i in done or i not in self.datasets for i in self.inputs_of(n))
            ]
            if not ready:  # a cycle: validation reports it; emit the rest in name order
                ready = pending[:1]
            for n in ready:
                done.add(n)
                pending.remove(n)
                yield self.datasets[n]
