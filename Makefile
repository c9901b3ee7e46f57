# Accelerator Portal — see README.md. `make demo` and `make test` are the two entry points.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: demo test venv lint check migrate worker beat run bench clean

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

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

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
	$(VENV)/bin/gunicorn portal.wsgi --bind 127.0.0.1:8000 --workers 2

bench: $(STAMP)
	$(PY) bench/sync_large.py
	$(PY) bench/cel_select.py
	$(PY) bench/capacity_large.py --reuse
	$(PY) bench/explain_large.py
	$(PY) bench/validate_large.py
	$(PY) bench/chargeback_large.py

clean:
	rm -rf var
