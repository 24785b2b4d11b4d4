# StreamForge Web: the two set-up commands are `make demo` and `make test`; the rest are for day-to-day work.
# Every target installs what it needs first (Python venv, Debian packages, jars from Maven Central), idempotently.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-$(shell cat pyproject.toml | sha256sum | cut -c1-16)

.PHONY: help venv system up down status demo test lint types check-deploy clean bench bench-pipeline

help:
	@echo "make demo   - start the whole stack (Kafka, Redis, web, worker, beat) and say what runs where"
	@echo "make test   - lint, types and the whole test suite against real services on test ports"
	@echo "make up | down | status - manage the local stack (dev ports 9092/6379/8000)"
	@echo "make bench  - raw Kafka copy vs Python loop vs our Spark pipeline -> artifacts/bench/report.md (BENCH_ARGS=--quick)"

$(DEPS_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.deps-* && touch $@

venv: $(DEPS_STAMP)

system: venv
	$(PY) -m devstack system

up: venv system
	$(PY) -m devstack up

down:
	@if [ -x $(PY) ]; then $(PY) -m devstack down; fi

status: venv
	$(PY) -m devstack status

demo: up
	@$(PY) -m devstack status
	@echo
	@echo "StreamForge Web is up: open http://127.0.0.1:8000/  (API docs: http://127.0.0.1:8000/api/docs/)"
	@echo "Stop everything with: make down"

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

types: venv
	DJANGO_DEBUG=true $(PY) -m mypy .

check-deploy: venv
	DJANGO_DEBUG=false DJANGO_SECRET_KEY=$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(50))') \
	  $(PY) manage.py check --deploy --fail-level WARNING

# The test services run on their own ports (Kafka 19092, Redis 16379) so a running demo is not disturbed;
# they are stopped afterwards whatever the outcome, and the suite's exit code is kept.
test: venv system lint types check-deploy
	$(PY) -m devstack --profile test up kafka redis
	@eval "$$($(PY) -m devstack --profile test env)"; \
	  $(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	  $(PY) -m devstack --profile test down kafka redis; exit $$rc

# The benchmark report (artifacts/bench/report.md, report.json, PNG plots) in one run: a raw Kafka copy, the
# Python consumer/evaluator/producer loop, and our Spark pipeline per delivery mode with 1 and 2 destinations
# (throughput and latency). Test ports; Kafka/Redis already answering there (another worktree's stack) are
# used as they are. BENCH_ARGS="--quick" for a smoke run, "--only spark_pipeline --records 400000" etc.
bench: venv system
	@$(PY) -m devstack --profile test up kafka redis || echo "bench: using the services already on the test ports"
	@eval "$$($(PY) -m devstack --profile test env)"; $(PY) -m bench run $(BENCH_ARGS)

# End-to-end throughput of one pipeline (1 KB records, real Kafka and Spark) on the test ports.
bench-pipeline: venv system
	$(PY) -m devstack --profile test up kafka redis
	@eval "$$($(PY) -m devstack --profile test env)"; $(PY) -m bench.pipeline_throughput $(BENCH_ARGS)

clean: down
	rm -rf .stack
