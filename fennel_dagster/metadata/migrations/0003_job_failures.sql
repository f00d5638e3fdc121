-- Partitions stopped by a permanent error: the runner records why; supervisors and the
-- Dagster keep-alive sensor leave them stopped until the job changes or the row is cleared.
CREATE TABLE job_failures (
    job_hash    text NOT NULL REFERENCES jobs (hash) ON DELETE CASCADE,
    partition   integer NOT NULL,
    owner       text NOT NULL,               -- engine id or Dagster run id
    reason      text NOT NULL,
    failed_at   timestamptz NOT NULL,
    PRIMARY KEY (job_hash, partition)
);
