-- The asset bank, branches, commits, the two ledgers and the job registry.
-- Engines and query servers read these tables; the commit protocol writes them.

CREATE TABLE branches (
    name        text PRIMARY KEY,
    head        bigint,                      -- commits.id of the branch's current graph; NULL: empty
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE commits (
    id          bigserial PRIMARY KEY,
    branch      text NOT NULL,
    parent      bigint,                      -- the head this commit replaced
    message     text NOT NULL,
    author      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    wire        bytea NOT NULL,              -- canonical wire bytes of the (merged) CommitSpec
    hashes      text[] NOT NULL              -- the blueprint hashes the branch references from here on
);

-- Every physical asset ever created. state: creating -> live -> destroying -> destroyed.
CREATE TABLE assets (
    hash        text PRIMARY KEY,
    kind        text NOT NULL,
    name        text NOT NULL,
    entity      text NOT NULL,
    spec        jsonb NOT NULL,
    state       text NOT NULL CHECK (state IN ('creating', 'live', 'destroying', 'destroyed')),
    attempt     uuid,                        -- the commit attempt that is creating it
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX assets_state ON assets (state);

-- Branch -> asset references; an asset's ref count is its number of rows here.
CREATE TABLE refs (
    branch      text NOT NULL REFERENCES branches (name) ON DELETE CASCADE,
    hash        text NOT NULL REFERENCES assets (hash),
    PRIMARY KEY (branch, hash)
);
CREATE INDEX refs_hash ON refs (hash);

-- One row per commit attempt; 'open' attempts of a branch nobody holds the lock of are dead.
CREATE TABLE commit_attempts (
    attempt     uuid PRIMARY KEY,
    branch      text NOT NULL,
    base_head   bigint,
    state       text NOT NULL CHECK (state IN ('open', 'committed', 'aborted')),
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

-- Creation ledger: intent recorded (and committed) before any physical creation.
CREATE TABLE creation_ledger (
    id          bigserial PRIMARY KEY,
    attempt     uuid NOT NULL REFERENCES commit_attempts (attempt),
    hash        text NOT NULL,
    state       text NOT NULL CHECK (state IN ('intent', 'created', 'committed', 'rolled_back')),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX creation_ledger_attempt ON creation_ledger (attempt);

-- Destruction ledger: written only at a commit point, carried out after it.
CREATE TABLE destruction_ledger (
    id          bigserial PRIMARY KEY,
    commit_id   bigint,                      -- NULL for branch deletions
    hash        text NOT NULL REFERENCES assets (hash),
    state       text NOT NULL CHECK (state IN ('pending', 'done')),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX destruction_ledger_pending ON destruction_ledger (state) WHERE state = 'pending';

-- Job registry: what engines must run. Rows appear and vanish at commit points.
CREATE TABLE jobs (
    hash        text PRIMARY KEY REFERENCES assets (hash),
    name        text NOT NULL UNIQUE,
    kind        text NOT NULL,               -- source | pipeline | index
    partitions  integer NOT NULL,
    spec        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE job_partitions (
    job_hash    text NOT NULL REFERENCES jobs (hash) ON DELETE CASCADE,
    partition   integer NOT NULL,
    PRIMARY KEY (job_hash, partition)
);

-- Engines register with a heartbeat lease; the supervisor assigns partitions among live ones.
CREATE TABLE engines (
    id          text PRIMARY KEY,
    address     text NOT NULL,               -- host:port of its lookup endpoint
    heartbeat_at timestamptz NOT NULL,
    lease_until timestamptz NOT NULL
);

-- Each runner's own liveness, judged by the engine sensor / supervisor.
CREATE TABLE runner_heartbeats (
    job_hash    text NOT NULL,
    partition   integer NOT NULL,
    owner       text NOT NULL,               -- engine id or Dagster run id
    pid         integer,
    heartbeat_at timestamptz NOT NULL,
    PRIMARY KEY (job_hash, partition)
);

INSERT INTO branches (name) VALUES ('main');
