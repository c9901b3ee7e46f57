# Accelerator Portal — see README.md. `make demo` and `make test` are the two entry points.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test` and `make test-fast` (--dist loadfile: a module's tests share one worker, so its
# module-scoped simulator is built once). Four on two cores: much of a test's time is waiting on PostgreSQL, a
# simulator or a subprocess. TEST_WORKERS=0 runs in this one process.
TEST_WORKERS ?= 4
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile

.PHONY: demo test test-fast typecheck prereqs venv lint check migrate worker beat run bench bench-load clean audit

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@mkdir -p var
	DJANGO_SETTINGS_MODULE=portal.settings.demo $(PY) manage.py migrate --noinput -v0
	DJANGO_SETTINGS_MODULE=portal.settings.demo $(PY) manage.py demo

# The whole suite. First the system tools it needs and the type check (`make typecheck`) (scripts/test-prereqs: installs Debian's chromium and
# docker-compose when run as root, else prints the command), then the dependency audit (exit 3 = the advisory service
# is unreachable: said loudly, not a pass), then pytest against the machine's PostgreSQL and Redis.
test: $(STAMP) prereqs typecheck
	@$(PY) scripts/dependency_audit.py --installed || { status=$$?; [ $$status = 3 ] && \
	  echo "make test: continuing WITHOUT a dependency audit (the advisory service is unreachable; not a pass)" >&2 \
	  || exit $$status; }
	$(PY) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# The fast lane for the edit-test loop (under 2 minutes here): no browser, no Celery/gunicorn/Prometheus processes,
# no kubectl, no chaos. Tests that use such a fixture are marked `slow` by a collection hook (SLOW_FIXTURES in
# tests/conftest.py), so a new one cannot slip in unmarked; so are, by hand, subprocess-driven modules and single
# tests over about 3 s (their marks say why). No system tools needed; `make test` (CI) runs everything.
test-fast: $(STAMP)
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow and not browser and not chaos" $(PYTEST_ARGS)

prereqs:
	@scripts/test-prereqs

# mypy with django-stubs: the strict set ([tool.mypy] in pyproject.toml) must be clean; the baseline only shrinks.
typecheck: $(STAMP)
	$(VENV)/bin/mypy

lint: $(STAMP)
	$(VENV)/bin/ruff check .

check: lint
	DJANGO_SETTINGS_MODULE=portal.settings.test $(PY) manage.py makemigrations --check --dry-run
	DJANGO_SETTINGS_MODULE=portal.settings.test $(PY) manage.py check
	$(MAKE) test

migrate: $(STAMP)
	$(PY) manage.py migrate

worker: $(STAMP)
	$(PY) -m celery -A portal worker -Q watch -P threads -c 50 -n watch@%h & \
	$(PY) -m celery -A portal worker -Q webhooks -P threads -c 8 -n webhooks@%h & \
	$(PY) -m celery -A portal worker -Q default -c 2 -n default@%h; wait

beat: $(STAMP)
	$(PY) -m celery -A portal beat

run: $(STAMP)
	$(VENV)/bin/gunicorn portal.wsgi --config python:portal.gunicorn_conf --env PROMETHEUS_MULTIPROC_DIR=$(CURDIR)/var/prometheus-multiproc --bind 127.0.0.1:8000 --workers 2

bench: $(STAMP)
	$(PY) bench/sync_large.py
	$(PY) bench/cel_select.py
	$(PY) bench/capacity_large.py --reuse
	$(PY) bench/explain_large.py
	$(PY) bench/validate_large.py
	$(PY) bench/chargeback_large.py

# 50 clients on `large` with churn: page and API latency, error rate, and sync lag without and with the load.
bench-load: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) bench/load.py

# Known vulnerabilities in the pins (and the venv's transitive dependencies) against OSV. Exit 3 = NOT RUN: the
# advisory service is unreachable, nothing was checked (docs/deploy.md, "Dependency audit").
audit: $(STAMP)
	$(PY) scripts/dependency_audit.py --installed $(AUDIT_ARGS)

clean:
	rm -rf var
