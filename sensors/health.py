"""Health as asset observations: per dataset its stream (rows, errors, lag, newest event)
and the outages the engines rode out; per featureset what the query servers saw (requests,
p99, errors)."""

import json
from datetime import UTC, datetime

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
from fennel_dagster.engine.health import stream_health as stream_health_of
from fennel_dagster.metadata import server_stats
from fennel_dagster.metadata.registry import recent_outages
from resources import MetadataStore
from sensors import unreachable


@sensor(minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
        description="Observes each committed dataset's stream: rows, errors, lag, last event.")  # fmt: skip
def stream_health(
    context: SensorEvaluationContext, metadata: MetadataStore
) -> SensorResult | SkipReason:
    """The runners report their streams to Postgres (``stream_stats``), so a tick is a few
    queries whatever the size of the fleet; the cursor keeps what each asset last showed,
    and only a change is observed again."""
    try:
        with metadata.connect(autocommit=True) as conn:
            found = stream_health_of(conn)
            outages = recent_outages(conn, 24 * 3600)
    except psycopg.errors.UndefinedTable as e:  # a schema nothing was committed to yet
        return SkipReason(f"no committed definitions to observe ({type(e).__name__})")
    except psycopg.OperationalError as e:
        return unreachable(e)
    # outages the engines rode out: said once each, on every dataset they may have delayed
    rode_out = "\n".join(
        f"{o.began_at:%Y-%m-%d %H:%M:%S} {o.process}: {o.service} unreachable {o.seconds:.1f}s"
        for o in outages[-10:]
    ) or "none"  # fmt: skip
    shown: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    now = datetime.now(UTC)
    events, showing = [], {}
    for h in found:
        path = catalog.asset_path(h.branch, h.dataset)
        values: dict[str, int | float | str] = {
            "rows": h.rows, "error rows": h.bad_rows,
            "consumer lag": h.lag if h.lag is not None else "unknown",
            "caught up": "yes" if h.caught_up else "no",
            "index lag": h.index_lag if h.index_lag is not None else "none",
            "last event time": h.newest_event.isoformat() if h.newest_event else "none",
            "runners reporting": f"{h.running} of {h.partitions}",
            "stopped partitions": len(h.stopped),
            "stopped because": "\n".join(h.stopped) or "none",
            "outages ridden out (24 h)": rode_out,
        }  # fmt: skip
        key = "/".join(path)
        showing[key] = json.dumps(values, sort_keys=True, default=str)
        if shown.get(key) == showing[key]:
            continue
        if h.newest_event is not None:
            values["event time lag s"] = round((now - h.newest_event).total_seconds(), 1)
        events.append(AssetObservation(asset_key=AssetKey(path), metadata=values))
    cursor = json.dumps(showing, sort_keys=True)
    if not events:
        context.update_cursor(cursor)
        return SkipReason(f"{len(found)} datasets; none changed since the last tick")
    return SensorResult(asset_events=events, cursor=cursor)


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
