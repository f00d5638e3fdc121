"""The sample an `@expectations` check judges is read to the end of every partition of the
dataset's topic (real Kafka): a slow read is waited for, and one that cannot finish is an
error naming the dataset, never a short sample judged (which could pass a failing check)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer

from fennel_dagster.errors import ExecutionError
from fennel_dagster.ops.rows import dumps
from fennel_dagster.quality import expectations
from fennel_dagster.quality.expectations import sample
from fennel_dagster.settings import Settings
from fennel_dagster.wire import spec
from tests.engine.harness import create_topic

pytestmark = pytest.mark.services

DS = spec.DatasetSpec(
    name="Payment", version=1,
    fields=(spec.FieldSpec("uid", spec.IntType(), key=True), spec.FieldSpec("amount", spec.FloatType())),
)  # fmt: skip


def _produce(s: Settings, topic: str, rows: range, partition: int) -> None:
    p = Producer({"bootstrap.servers": s.kafka_servers})
    for i in rows:
        p.produce(topic, dumps({"uid": i, "amount": float(i)}), partition=partition)
    assert p.flush(30) == 0


def test_the_sample_holds_the_newest_rows_of_every_partition(
    live_stack: Settings, unique_name: str
) -> None:
    create_topic(live_stack, unique_name, partitions=2)
    _produce(live_stack, unique_name, range(0, 30), 0)
    _produce(live_stack, unique_name, range(30, 40), 1)
    df = sample(live_stack.kafka_servers, unique_name, DS, rows=20)
    # 10 a partition: the newest of partition 0 (the last ten or eleven) and all of 1
    assert set(range(30, 40)) <= set(df.uid) and set(df.uid) <= set(range(19, 40))
    assert len(df) >= 20


def test_a_read_that_cannot_reach_the_end_is_an_error_naming_the_dataset(
    live_stack: Settings, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polls that bring nothing (a broker too slow to answer) until the deadline: an error,
    where the sample used to end at the first quiet poll and judge no rows at all."""

    class Silent(expectations.Consumer):  # type: ignore[misc]
        def poll(self, timeout: float = -1) -> None:
            time.sleep(min(timeout, 0.2))

    create_topic(live_stack, unique_name, partitions=2)
    _produce(live_stack, unique_name, range(5), 0)
    monkeypatch.setattr(expectations, "Consumer", Silent)
    with pytest.raises(ExecutionError, match=r"dataset 'Payment'.*partitions \[0, 1\]"):
        sample(live_stack.kafka_servers, unique_name, DS, read_timeout_s=1)


def test_expectations_run_in_a_process_whose_main_module_has_no_file() -> None:
    """`python -c` (and an xdist worker): great-expectations imports pyspark.sql.connect,
    which ended such a process with exit code 0 and no word while Spark Connect's
    dependencies were missing (the `connect` extra of pyspark now brings them)."""
    code = (
        "import pandas as pd\n"
        "from fennel_dagster.quality.expectations import run\n"
        "from fennel_dagster.wire import spec\n"
        "e = spec.ExpectationSpec('expect_column_values_to_be_between',"
        " (('column', 'amount'), ('max_value', 10), ('min_value', 0)))\n"
        "r = run([e], pd.DataFrame({'amount': [1.0, 50.0]}))\n"
        "print('judged', r[0].success)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "judged False" in done.stdout, done.stderr[-2000:]
