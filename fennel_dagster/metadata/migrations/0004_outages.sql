-- Outages a long-lived process rode out (Postgres unreachable, ...): written once the
-- process reaches Postgres again, shown on the Dagster assets by the stream-health sensor.
CREATE TABLE outages (
    id          bigserial PRIMARY KEY,
    process     text NOT NULL,               -- engine id, Dagster run id, server name
    service     text NOT NULL,               -- what was unreachable
    began_at    timestamptz NOT NULL,
    seconds     double precision NOT NULL,
    error       text NOT NULL
);
CREATE INDEX outages_began_at ON outages (began_at);
