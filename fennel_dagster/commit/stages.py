"""Where a pipeline job is cut into stages, and which shapes the engine cannot cut.

The engine runs a pipeline in one job partition at a time, so rows with the same group key
must meet in one partition. Keyed operators (aggregate, first, latest) therefore need their
input partitioned by their keys: either it already is (every input dataset of the prefix
is keyed by exactly those keys, in the same order, and nothing before the operator changes
a key column), or the job is cut in two around a repartition topic: stage 1 runs the DAG up
to the *cut* (the first keyed operator's input), stage 2 runs the rest.

``problems`` lists the shapes that cannot be cut; the definition server refuses them at
commit (``commit.validate``), so the compiler and the engine only ever see cuttable DAGs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fennel_dagster.wire import spec

KEYED_NODES = (spec.AggregateNode, spec.FirstNode, spec.LatestNode)
# operators that keep state between batches (a job running one needs a snapshot prefix)
STATEFUL_NODES = (*KEYED_NODES, spec.JoinNode, spec.DedupNode, spec.ChangelogNode)
KeyedNode = spec.AggregateNode | spec.FirstNode | spec.LatestNode


@dataclass(frozen=True)
class Problem:
    """A pipeline shape the engine cannot run: the operator, what is wrong, and the fix."""

    operator: str
    message: str
    fix: str


@dataclass(frozen=True)
class Cut:
    """The first keyed operator's input (``node``) and the keys its rows are grouped by."""

    node: str
    keys: tuple[str, ...]


def parents(n: spec.Node) -> tuple[str, ...]:
    if isinstance(n, spec.UnionNode):
        return n.inputs
    if isinstance(n, spec.InputNode):
        return ()
    return (n.input,)


def ancestors(p: spec.PipelineSpec, node_id: str) -> set[str]:
    """``node_id`` and every node it reads from, transitively."""
    by_id = {n.id: n for n in p.nodes}
    out: set[str] = set()
    todo = [node_id]
    while todo:
        cur = todo.pop()
        if cur not in out:
            out.add(cur)
            todo.extend(parents(by_id[cur]))
    return out


def _keyed(p: spec.PipelineSpec) -> list[KeyedNode]:
    return [n for n in p.nodes if isinstance(n, KEYED_NODES)]


def problems(p: spec.PipelineSpec) -> list[Problem]:
    keyed = _keyed(p)
    if not keyed:
        return []
    first = keyed[0]
    cut = first.input
    before = ancestors(p, cut)
    out: list[Problem] = []
    for later in keyed[1:]:
        if set(later.keys) != set(first.keys):
            out.append(Problem(later.id, (
                f"groups by {list(later.keys)} but the pipeline's first keyed operator "
                f"{first.id} groups by {list(first.keys)}; one job partition holds one key's "
                "rows, so every keyed operator of a pipeline must use the same keys"),
                "write the first grouping to a dataset of its own and group it again in a "
                "second pipeline"))  # fmt: skip
    read = {parent for n in p.nodes for parent in parents(n)}
    seen_cut = False
    for n in p.nodes:
        if n.id == cut:
            seen_cut = True
            continue
        # an input no operator streams from (a join's right side: it is looked up) runs nowhere
        unread_input = isinstance(n, spec.InputNode) and n.id not in read
        if not seen_cut and n.id not in before and not unread_input:
            out.append(Problem(n.id, (
                f"runs beside the input of the keyed operator {first.id} ({cut}); the engine "
                "repartitions at that operator, so every node before it must feed it"),
                "move the branch after the keyed operator, or into a pipeline of its own"))  # fmt: skip
        if seen_cut:
            for parent in parents(n):
                if parent != cut and parent in before:
                    out.append(Problem(n.id, (
                        f"reads {parent}, which is before the repartition at {cut} (the input "
                        f"of {first.id})"), f"read from {first.id} or a node after it instead"))  # fmt: skip
    return out


def cut_of(
    p: spec.PipelineSpec, datasets: Mapping[str, spec.DatasetSpec], output: spec.DatasetSpec
) -> Cut | None:
    """Where to repartition (None: one stage, because no operator is keyed or its input is
    already partitioned by its keys). Assumes ``problems(p)`` is empty."""
    keyed = _keyed(p)
    if not keyed:
        return None
    first = keyed[0]
    keys = _in_output_order(first.keys, output)
    if _partitioned_by(p, first.input, keys, datasets):
        return None
    return Cut(first.input, keys)


def _in_output_order(keys: tuple[str, ...], output: spec.DatasetSpec) -> tuple[str, ...]:
    """Group keys in the order of the output dataset's keys, so a lookup of the output
    (routed by the dataset's keys) reaches the partition that holds the group's state."""
    if set(keys) == set(output.keys):
        return output.keys
    return keys


def _partitioned_by(
    p: spec.PipelineSpec,
    node_id: str,
    keys: tuple[str, ...],
    datasets: Mapping[str, spec.DatasetSpec],
) -> bool:
    """Are ``node_id``'s rows already in the partition of their ``keys``? Yes when every
    input feeding it is a dataset keyed by exactly ``keys`` and no node on the way can
    change a key column's value."""
    by_id = {n.id: n for n in p.nodes}
    for nid in ancestors(p, node_id):
        n = by_id[nid]
        if isinstance(n, spec.InputNode):
            ds = datasets.get(n.dataset)
            if ds is None or ds.keys != keys:
                return False
        elif isinstance(n, spec.TransformNode | spec.RenameNode):
            return False  # may rewrite or rename any column, keys included
        elif isinstance(n, spec.AssignNode):
            if any(c.name in keys for c in n.columns):
                return False
        elif isinstance(n, spec.ExplodeNode):
            if any(c in keys for c in n.columns):
                return False
        elif isinstance(n, KEYED_NODES):
            return False
    return True
