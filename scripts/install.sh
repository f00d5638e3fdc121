#!/usr/bin/env bash
# Installs what fennel_dagster needs on a fresh Debian machine, skipping what is present:
# system packages (PostgreSQL server, Java 17, Maven), a Python 3.11 venv with uv, the project.
# Maven jars are fetched by `fennel-dagster stack up` itself.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing system packages: ${missing[*]} — run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing system packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # Debian starts the system cluster on install; ours runs separately on its own port.
fi

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
command -v uv >/dev/null || "$PYTHON" -m pip install -q uv
[ -x .venv/bin/python ] || uv venv -q -p "$PYTHON" .venv

stamp=.venv/.fennel-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing Python dependencies into .venv"
  uv pip install -q -p .venv/bin/python -e '.[test]'
  echo "$want" > "$stamp"
fi
