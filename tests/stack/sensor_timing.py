"""Times each sensor's own evaluation (our function alone, no daemon, gRPC or run launch).

Run with a platform's environment (``FENNEL_*``, ``DAGSTER_HOME``) as
``python -m tests.stack.sensor_timing ROUNDS``; prints ``{sensor: [seconds, ...]}`` as JSON.
Each round starts from the cursor the previous one left, as the daemon's ticks do.
"""

from __future__ import annotations

import json
import sys
import time

from dagster import DagsterInstance, build_sensor_context


def main(rounds: int) -> dict[str, list[float]]:
    from assets.definitions import defs
    from resources import resources

    took: dict[str, list[float]] = {}
    with DagsterInstance.get() as instance:
        for sensor in defs.sensors:
            cursor = None
            for _ in range(rounds):
                context = build_sensor_context(
                    instance=instance,
                    cursor=cursor,
                    definitions=defs,
                    sensor_name=sensor.name,
                    resources=resources(),
                )
                started = time.perf_counter()
                sensor(context)
                took.setdefault(sensor.name, []).append(time.perf_counter() - started)
                cursor = context.cursor
    return took


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]))))
