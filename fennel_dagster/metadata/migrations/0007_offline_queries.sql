-- Offline (point-in-time) queries: a client inserts a request, a Dagster run (or the
-- client's own Spark session) executes it, reporting progress here; clients poll the row
-- and may ask for a cancel, which the running query sees within a second.
CREATE TABLE offline_queries (
    id          bigserial PRIMARY KEY,
    branch      text NOT NULL,
    request     jsonb NOT NULL,              -- inputs, outputs, timestamp column, input/output
    state       text NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    cancel      boolean NOT NULL DEFAULT false,
    run_id      text,
    progress    jsonb,                       -- stage, tasks done/total, elapsed, ETA
    result      jsonb,                       -- output path, rows, seconds; or the error
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX offline_queries_pending ON offline_queries (id) WHERE state = 'pending';
