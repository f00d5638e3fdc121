"""Health as asset observations: per dataset its stream (rows, errors, lag, newest event)
and the outages the engines rode out; per featureset what the query servers saw (requests,
p99, errors)."""

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
from fennel_dagster.metadata import server_stats
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


@sensor(minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
        description="Observes each featureset as the query servers answer it: requests, p99, errors.")  # fmt: skip
def query_health(
    context: SensorEvaluationContext, metadata: MetadataStore
) -> SensorResult | SkipReason:
    try:
        with metadata.connect(autocommit=True) as conn:
            rows = server_stats.fresh(conn, 120)
    except psycopg.ProgrammingError as e:  # no query server has run against this schema
        return SkipReason(f"no query server statistics yet ({type(e).__name__})")
    except psycopg.OperationalError as e:
        return unreachable(e)
    by_asset: dict[tuple[str, str], list[server_stats.FeaturesetStats]] = {}
    for r in rows:
        by_asset.setdefault((r.branch, r.featureset), []).append(r)
    events = [
        AssetObservation(
            asset_key=AssetKey(catalog.asset_path(branch, fs)),
            metadata={
                "query servers": len(stats),
                "requests (last minute)": sum(s.requests for s in stats),
                "errors (last minute)": sum(s.errors for s in stats),
                "p50 ms (worst server)": round(max(s.p50_ms for s in stats), 3),
                "p99 ms (worst server)": round(max(s.p99_ms for s in stats), 3),
            },
        )  # fmt: skip
        for (branch, fs), stats in sorted(by_asset.items())
    ]
    return (
        SensorResult(asset_events=events) if events else SkipReason("no queries in the last minute")
    )
