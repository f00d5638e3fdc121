"""Which source and pipeline partitions run fused (a *chain*), and the ids that fence them.

A source job is a function of its dataset alone (it is shared by every branch that holds the
dataset), so the plan cannot fuse it with a pipeline: two branches would run two writers of
one topic. Fusion is the engine's choice instead, made where it runs both: partition ``p``
of a source and partition ``p`` of a pipeline that streams its dataset run as one chain, in
one thread and one Kafka transaction a batch (``engine.chain``). Each job keeps its own
state, replaylog, consumer group and offsets, so either runs on alone from where the chain
left it.

A chain is possible when the source job is the only writer of its dataset topic's partition
``p``: the dataset has one source and no pipeline, and its rows stay in the partition that
made them (keyless, or one partition). Then the pipeline's input is exactly the rows the
source writes, in the order it writes them, and the chain can hand them over in memory once
the pipeline has read what the topic held before.

Fencing. A chain writes both jobs' outputs under a transactional id of its own (one per source
partition), so the next runner of either job alone fences the chain it could have been part
of, and a chain fences both jobs' own ids: partitions are assigned here, not subscribed, so
there is no consumer-group generation to fence a stale runner by.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fennel_dagster.metadata.registry import JobRow
from fennel_dagster.wire import plan

Key = tuple[str, int]  # (job hash, partition)


def fusable(source: plan.JobSpec, pipe: plan.JobSpec) -> bool:
    """Whether ``source``'s partitions can run fused with ``pipe``'s of the same number."""
    if not isinstance(source, plan.SourceJobSpec) or not isinstance(pipe, plan.PipelineJobSpec):
        return False
    ds = source.dataset
    sole_writer = len(ds.sources) == 1 and not ds.pipelines
    stays = not ds.keys or source.partitions == 1  # its rows stay in the partition made in
    streams_it = [s.topic for s in pipe.inputs] == [source.output_topic]
    return sole_writer and stays and streams_it and source.partitions == pipe.partitions


def partner_of(source: JobRow, jobs: Iterable[JobRow]) -> JobRow | None:
    """The pipeline a source fuses with: the first by name of those it could (one only:
    the others read its topic)."""
    return min(
        (j for j in jobs if fusable(source.spec, j.spec)), key=lambda j: j.name, default=None
    )


def followed(jobs: Iterable[JobRow]) -> dict[str, str]:
    """Pipeline job hash -> the hash of the source job it fuses with (its partitions are
    owned where the source's are)."""
    jobs = list(jobs)
    out: dict[str, str] = {}
    for job in jobs:
        partner = partner_of(job, jobs) if job.kind == "source" else None
        if partner is not None:
            out[partner.hash] = job.hash
    return out


def chains(want: Mapping[Key, JobRow], jobs: Iterable[JobRow] | None = None) -> dict[Key, Key]:
    """Pipeline partition -> the source partition it runs fused with, both in ``want`` (the
    partner chosen among all ``jobs``, default ``want``'s, as every engine chooses it)."""
    every = list(jobs) if jobs is not None else list({j.hash: j for j in want.values()}.values())
    out: dict[Key, Key] = {}
    for (h, p), job in want.items():
        partner = partner_of(job, every) if job.kind == "source" else None
        if partner is not None and (partner.hash, p) in want:
            out[(partner.hash, p)] = (h, p)
    return out


def chain_txn_id(source: str, partition: int) -> str:
    """The transactional id of the chain of ``source``'s partition, whichever its pipeline:
    one id per source partition, so the source's next runner has one chain to fence."""
    return f"chain:{source}.p{partition}"


def fenced_chains(job: JobRow, partition: int, jobs: Iterable[JobRow]) -> list[str]:
    """The ids of the chains ``job``'s partition could have run in, which its runner alone
    fences: a source's, and a pipeline's source's if it is that source's partner."""
    jobs = list(jobs)
    if job.kind == "source":
        return [chain_txn_id(job.name, partition)] if partner_of(job, jobs) else []
    return [chain_txn_id(j.name, partition) for j in jobs
            if fusable(j.spec, job.spec) and partner_of(j, jobs) == job]  # fmt: skip
