#!/usr/bin/env bash
# A venv of its own for Quix Streams (bench/.work/quix-venv), the streaming benchmark's peer:
# quixstreams pins confluent-kafka < 2.13 while the project runs 2.16, so it cannot share
# the project's .venv. Used by bench/stream_bench.py (it runs this script when the venv is
# missing). Idempotent: a second run only checks the pin and returns.
set -euo pipefail
cd "$(dirname "$0")/.."

# quixstreams 3.28.1: the newest release when the benchmark was rewritten (2026-11-24).
QUIX_VERSION=3.28.1

VENV=bench/.work/quix-venv
PY="$VENV/bin/python"

if [ -x "$PY" ] && "$PY" - "$QUIX_VERSION" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version

sys.exit(0 if version("quixstreams") == sys.argv[1] else 1)
PYEOF
then
  echo "quixstreams $QUIX_VERSION already in $VENV"
  exit 0
fi

mkdir -p "$(dirname "$VENV")"
[ -x "$PY" ] || python3.11 -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet "quixstreams==$QUIX_VERSION"
"$PY" -W ignore -c "from importlib.metadata import version as v; print('quixstreams', v('quixstreams'), 'confluent-kafka', v('confluent-kafka'))"
