-- What each runner reports of its stream, per job partition, every heartbeat: cumulative
-- counts over the partition's runner lives, the input lag and the newest event time it
-- wrote. The Dagster stream-health sensor and `fennel-dagster demo` read this table, so
-- observing a dataset costs one query instead of Kafka round trips per partition.
CREATE TABLE stream_stats (
    job_hash     text NOT NULL,
    partition    integer NOT NULL,
    messages     bigint NOT NULL DEFAULT 0,   -- input messages processed
    rows_out     bigint NOT NULL DEFAULT 0,   -- rows written to the job's output topic
    bad_rows     bigint NOT NULL DEFAULT 0,   -- rows sent to the dataset's error topic
    lag          bigint,                      -- input messages behind the end, last measured
    newest_event timestamptz,                 -- newest event time among the rows written
    reported_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_hash, partition)
);
