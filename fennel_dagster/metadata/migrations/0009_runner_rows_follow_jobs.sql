-- A job's runner heartbeats and stream statistics go with its registry row: a deleted job
-- (a branch deletion, a version bump) leaves none behind, and a runner that beats once more
-- after the commit point cannot write them again (the insert finds no job).
DELETE FROM runner_heartbeats h WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.hash = h.job_hash);
DELETE FROM stream_stats s WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.hash = s.job_hash);
ALTER TABLE runner_heartbeats ADD CONSTRAINT runner_heartbeats_job
    FOREIGN KEY (job_hash) REFERENCES jobs (hash) ON DELETE CASCADE;
ALTER TABLE stream_stats ADD CONSTRAINT stream_stats_job
    FOREIGN KEY (job_hash) REFERENCES jobs (hash) ON DELETE CASCADE;
