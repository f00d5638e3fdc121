"""Stream health as asset observations: rows, errors, lag and newest event per dataset, and
the outages (Postgres unreachable, ...) the engines rode out."""

import psycopg
from dagster import (
    AssetKey,
    AssetObservation,
    DefaultSensorStatus,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from fennel_dagster.commit import catalog
from fennel_dagster.engine.health import dataset_health
from fennel_dagster.metadata.registry import failures, list_jobs, recent_outages
from resources import KafkaResource, MetadataStore
from sensors import unreachable


@sensor(minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
        description="Observes each committed dataset's stream: rows, errors, lag, last event.")  # fmt: skip
def stream_health(
    context: SensorEvaluationContext, metadata: MetadataStore, kafka: KafkaResource
) -> SensorResult | SkipReason:
    try:
        with metadata.connect(autocommit=True) as conn:
            cats = catalog.load(conn)
            jobs = list_jobs(conn)
            stopped = failures(conn)
            outages = recent_outages(conn, 24 * 3600)
    except psycopg.ProgrammingError as e:  # a schema nothing was committed to yet
        return SkipReason(f"no committed definitions to observe ({type(e).__name__})")
    except psycopg.OperationalError as e:
        return unreachable(e)
    # outages the engines rode out: said once each, on every dataset they may have delayed
    rode_out = (
        "\n".join(
            f"{o.began_at:%Y-%m-%d %H:%M:%S} {o.process}: {o.service} unreachable {o.seconds:.1f}s"
            for o in outages[-10:]
        )
        or "none"
    )
    events = []
    for cat in cats:
        if cat.graph is None:
            continue
        for ds in cat.graph.datasets:
            phys = cat.of_dataset(ds.name)
            topic = next((a.name for a in phys if a.kind == "topic" and a.role == "dataset"), None)
            err = next((a.name for a in phys if a.kind == "topic" and a.role == "error"), None)
            if topic is None:
                continue
            mine = [j for j in jobs if j.spec.dataset.name == ds.name]
            writers = [j for j in mine if j.kind in ("source", "pipeline")]
            h = dataset_health(kafka.servers(), topic, err, writers, ds.timestamp)
            failed = [f"{j.name} p{p}: {stopped[(j.hash, p)].reason}"
                      for j in mine for p in range(j.partitions) if (j.hash, p) in stopped]  # fmt: skip
            events.append(AssetObservation(asset_key=AssetKey(catalog.asset_path(cat.branch, ds.name)), metadata={
                "end offsets": h.messages, "error rows": h.errors, "consumer lag": h.lag,
                "last event time": h.last_event or "none",
                "stopped partitions": len(failed),
                "stopped because": "\n".join(failed) or "none",
                "outages ridden out (24 h)": rode_out,
            }))  # fmt: skip
    return SensorResult(asset_events=events) if events else SkipReason("no datasets")
