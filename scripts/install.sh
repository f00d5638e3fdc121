#!/usr/bin/env bash
# Installs what fennel_dagster needs on a fresh Debian machine, skipping what is present:
# system packages (PostgreSQL server, Java 17, Maven), a Python 3.11 venv made by uv, the
# project with its test extras. Maven jars are fetched by `fennel-dagster stack up` itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing+=(postgresql)
command -v python3.11 >/dev/null || command -v python3 >/dev/null || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing system packages: ${missing[*]} — run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing system packages: ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
  # Debian starts its own cluster on install (port 5432); ours is separate, on its own port.
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

# uv: on PATH, else as a module of $PYTHON, else installed with pip (Debian's system Python
# is "externally managed", hence --break-system-packages; pip itself may need apt).
if command -v uv >/dev/null; then
  UV=(uv)
else
  if ! "$PYTHON" -m uv --version >/dev/null 2>&1; then
    if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
      [ "$(id -u)" -eq 0 ] || { echo "install uv (pip install uv) and retry" >&2; exit 1; }
      apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null
    fi
    "$PYTHON" -m pip install -q uv 2>/dev/null \
      || "$PYTHON" -m pip install -q --break-system-packages uv
  fi
  UV=("$PYTHON" -m uv)
fi

stamp=.venv/.fennel-installed
# "-pyc": a venv installed before bytecode was compiled at install is installed again.
want="$(sha256sum pyproject.toml | cut -d' ' -f1)-${FENNEL_EXTRAS:-test}-pyc"
# Two attempts: a venv that vanished mid-install (a clean-up racing us) is made again.
for attempt in 1 2; do
  [ -x .venv/bin/python ] || "${UV[@]}" venv -q -p "$PYTHON" .venv
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    break
  fi
  echo "installing Python dependencies into .venv"
  # --compile-bytecode: uv leaves compiling to the first import, and where
  # PYTHONDONTWRITEBYTECODE is set (as where this project's CI runs) nothing is ever written,
  # so every new process (Dagster runs, commands, the engine and its fork server; runners fork
  # from that server) compiles pandas, dagster, ... from source again: 4.1 s of CPU before
  # `import fennel_dagster` returns, against 1.5 s compiled.
  if "${UV[@]}" pip install -q --compile-bytecode -p .venv/bin/python -e ".[${FENNEL_EXTRAS:-test}]" \
    && [ -x .venv/bin/python ]; then
    echo "$want" > "$stamp"
    break
  fi
  if [ "$attempt" -eq 2 ] || [ -x .venv/bin/python ]; then
    echo "could not install the Python dependencies into .venv" >&2
    exit 1
  fi
done

# The project is installed editable, so its own modules are outside site-packages: compiled
# here (only what changed since the last run), for the same reason.
.venv/bin/python -m compileall -q -j 0 -x '/\.work/' fennel_dagster assets sensors resources examples bench tools >/dev/null

# pyspark ships as an sdist: every fresh clone builds a 1.4 GB wheel into uv's cache, and on a
# machine that runs CI often those builds fill the disk. Pruning keeps what is still in use.
"${UV[@]}" cache prune -q 2>/dev/null || true
