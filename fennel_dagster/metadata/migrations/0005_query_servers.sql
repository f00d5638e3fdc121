-- Query servers: API tokens (only a hash of each secret is kept), the platform's service
-- credential (engines accept lookups only with it), and change notifications that keep the
-- servers' in-memory graphs and tokens fresh without a Postgres round trip per request.
-- (Engines are not watched: their heartbeat upserts would notify every few seconds; servers
-- re-read routes on a short period instead.)
CREATE TABLE api_tokens (
    id          text PRIMARY KEY,            -- the public part of a token: fdt_<id>_<secret>
    name        text NOT NULL,
    secret_hash text NOT NULL,               -- sha256 of the secret part, hex
    scopes      text[] NOT NULL,             -- query | log | commit | admin
    branches    text[] NOT NULL,             -- branch name patterns (fnmatch); '*': every branch
    entities    text[] NOT NULL,             -- featuresets and datasets it may touch; '*': all
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE TABLE service_credentials (
    name        text PRIMARY KEY,
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION notify_serving_change() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('fennel_serving', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME);
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER branches_changed AFTER INSERT OR UPDATE OR DELETE ON branches
    FOR EACH STATEMENT EXECUTE FUNCTION notify_serving_change();
CREATE TRIGGER refs_changed AFTER INSERT OR DELETE ON refs
    FOR EACH STATEMENT EXECUTE FUNCTION notify_serving_change();
CREATE TRIGGER jobs_changed AFTER INSERT OR DELETE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION notify_serving_change();
CREATE TRIGGER api_tokens_changed AFTER INSERT OR UPDATE OR DELETE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION notify_serving_change();
