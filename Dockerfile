# syntax=docker/dockerfile:1
# One image for every process of the portal: web (gunicorn, the default command), the Celery workers and beat,
# the migration Job, and the Kubernetes simulator of docker-compose.yml. See docs/deploy.md.
#
#   docker build -t accelerator-portal:dev .
#
# Nothing secret is baked in: settings come from the environment at run time (.dockerignore keeps .env out), and
# the values collectstatic needs exist only inside that one RUN of the build stage. No HEALTHCHECK: Kubernetes
# probes (deploy/kustomize/base) and compose decide health. Pin the base image by digest in your CI
# (--build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------------------- build
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src

# Wheels of the pinned runtime dependencies (pyproject.toml [project].dependencies, not the dev extras). This
# layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > requirements.txt \
 && pip wheel --wheel-dir /wheels --requirement requirements.txt \
 && cp requirements.txt /wheels/requirements.txt \
 && pip install --no-index --find-links /wheels --requirement /wheels/requirements.txt

# collectstatic needs importable settings: throwaway values, scoped to this RUN only (not ENV, not in the image).
COPY . .
RUN DJANGO_SETTINGS_MODULE=portal.settings.base \
    DJANGO_SECRET_KEY=collectstatic-only-not-a-secret \
    DATABASE_URL=sqlite:////tmp/collectstatic-unused.sqlite3 \
    DJANGO_STATIC_ROOT=/staticfiles \
    python manage.py collectstatic --noinput --verbosity 0

# -------------------------------------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
ARG PORTAL_UID=10001
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    DJANGO_STATIC_ROOT=/app/staticfiles \
    HOME=/tmp

# A fixed uid/gid (the manifests' runAsUser/runAsGroup/fsGroup use it); no login shell, no home directory.
RUN groupadd --system --gid ${PORTAL_UID} portal \
 && useradd --system --uid ${PORTAL_UID} --gid portal --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin portal

# Dependencies from the build stage's wheels (bind-mounted: the wheels never become a layer of this image).
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels --requirement /wheels/requirements.txt

# The application runs from its source tree (templates/ and static/ live beside the packages). Owned by root and
# read-only for the runtime user; byte-compiled here because the container's root filesystem is read-only.
WORKDIR /app
COPY . .
COPY --from=build /staticfiles /app/staticfiles
RUN python -m compileall -q -j 0 /app

USER ${PORTAL_UID}:${PORTAL_UID}
EXPOSE 8000
# The same command as deploy/kustomize/base/web.yaml and docker-compose.yml (tests/deploy/test_compose.py).
CMD ["gunicorn", "portal.wsgi", "--config", "python:portal.gunicorn_conf", \
     "--env", "PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus-multiproc", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--threads", "4", "--timeout", "60", "--graceful-timeout", "25", "--worker-tmp-dir", "/dev/shm", \
     "--no-control-socket", "--access-logfile", "-"]
