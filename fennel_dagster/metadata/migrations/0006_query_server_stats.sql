-- What each query server saw in its last window, per branch and featureset: the Dagster
-- query-health sensor turns the fresh rows into observations on the featureset assets.
CREATE TABLE query_server_stats (
    server      text NOT NULL,               -- host:port of the server process
    branch      text NOT NULL,
    featureset  text NOT NULL,
    window_s    double precision NOT NULL,
    requests    integer NOT NULL,
    errors      integer NOT NULL,
    p50_ms      double precision NOT NULL,
    p99_ms      double precision NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (server, branch, featureset)
);
