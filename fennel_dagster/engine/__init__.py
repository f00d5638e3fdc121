"""The streaming engine (seed 003): jobs, the Hangar state store, runners, the supervisor.

Data flow: ``jobs`` turn a batch of input messages into output records and state mutations
(pure logic, no IO); ``runner`` does all the IO for one job partition (Kafka transactions,
replaylog markers, RocksDB through ``hangar``, snapshots to S3 through ``snapshots``);
``supervisor`` decides which partitions this engine owns and keeps their runners alive;
``lookup_server`` answers point-in-time lookups from the state of owned partitions.
"""
