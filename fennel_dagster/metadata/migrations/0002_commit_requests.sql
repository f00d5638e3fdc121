-- Commit requests: how a client commits through a Dagster deployment. The client inserts a
-- request; the commit sensor launches one run per request (run_key = request id); the run
-- records progress and the outcome here, where the waiting client reads them.

CREATE TABLE commit_requests (
    id          bigserial PRIMARY KEY,
    branch      text NOT NULL,
    message     text NOT NULL,
    author      text NOT NULL,
    wire        bytea NOT NULL,              -- canonical wire bytes of the requested CommitSpec
    state       text NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'running', 'committed', 'rejected', 'failed')),
    run_id      text,
    progress    text[] NOT NULL DEFAULT '{}',
    result      jsonb,                       -- outcome, or the validation errors
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX commit_requests_pending ON commit_requests (id) WHERE state = 'pending';
