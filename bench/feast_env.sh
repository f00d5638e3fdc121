#!/usr/bin/env bash
# A venv of its own for Feast (bench/.work/feast-venv): Feast pins its own numpy/pandas/
# pydantic/SQLAlchemy ranges, which must not leak into the project's .venv. Used by
# bench/offline_feast.py, the Feast side of the offline point-in-time benchmark. Idempotent:
# a second run only checks the pins and returns.
set -euo pipefail
cd "$(dirname "$0")/.."

# feast 0.67.0: the newest release when this benchmark was written (Python >=3.10, so 3.11
# works); its [spark] extra asks for pyspark>=4, whose Spark 4 runs on the machine's Java 17.
FEAST_VERSION=0.67.0
# pyspark 4.2.0: the version fennel_dagster itself pins, so both contenders run the same
# Spark engine and the benchmark compares the point-in-time plans, not two Spark releases.
PYSPARK_VERSION=4.2.0

VENV=bench/.work/feast-venv
PY="$VENV/bin/python"

if [ -x "$PY" ] && "$PY" - "$FEAST_VERSION" "$PYSPARK_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version

import numpy, pandas, pyarrow  # noqa: E401,F401 (the data generator needs them)

sys.exit(0 if (version("feast"), version("pyspark")) == tuple(sys.argv[1:3]) else 1)
EOF
then
  echo "feast $FEAST_VERSION with pyspark $PYSPARK_VERSION already in $VENV"
  exit 0
fi

mkdir -p "$(dirname "$VENV")"
[ -x "$PY" ] || python3.11 -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet \
  "feast[spark]==$FEAST_VERSION" "pyspark==$PYSPARK_VERSION" numpy pandas pyarrow
"$PY" -c "import feast, pyspark; print('feast', feast.__version__, 'pyspark', pyspark.__version__)"
