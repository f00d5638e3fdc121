"""The platform's metadata store in Postgres: branches, commits, asset bank, ledgers, jobs."""
