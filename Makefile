# The two commands of the README:
#   make up    install everything, start the local stack, run the example live (Dagster UI,
#              engine runs, streaming events, features queryable)
#   make test  install everything, start the local stack, run the whole test suite
VENV := .venv/bin

.PHONY: install up test down status lint bench

install:
	@bash scripts/install.sh

up: install
	$(VENV)/fennel-dagster stack up
	$(VENV)/fennel-dagster demo

test: install
	$(VENV)/fennel-dagster stack up
	$(VENV)/ruff check fennel_dagster assets sensors resources tests bench examples tools
	$(VENV)/mypy fennel_dagster assets sensors resources tools
	$(VENV)/lint-imports
	$(VENV)/pytest tests -q -p no:cacheprovider --timeout=900 --durations=60

# the streaming benchmark (bench/README.md): Quix Streams, the peer, in a venv of its own
bench:
	bash scripts/install.sh
	bash bench/quix_env.sh
	$(VENV)/fennel-dagster stack up
	$(VENV)/python -m bench.stream_bench --events 100000 --keys 1000 --probes 50 --baseline $(BASELINE)

BASELINE ?= dce7931

down:
	@[ ! -x $(VENV)/fennel-dagster ] || $(VENV)/fennel-dagster stack down

status:
	$(VENV)/fennel-dagster stack status

lint:
	$(VENV)/ruff check fennel_dagster assets sensors resources tests examples bench
	$(VENV)/ruff format --check fennel_dagster assets sensors resources tests examples bench
