"""Shared fixtures: users per role, live and hand-made clusters, Prometheus; the hook that marks tests `slow`.
Each test creates the rows it asserts on."""

from __future__ import annotations

import ast
import contextlib
import itertools
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from portal.tenancy.roles import Role
from tests.tools import pytest_terminal_summary  # noqa: F401 - the loud count of tests skipped for a missing tool

# Fixtures that start something outside this process (Celery workers, gunicorn, Prometheus, kubectl) or a browser,
# by where they are defined (a name alone is ambiguous: tests/apitokens/test_pages.py's `browser` is a Django client).
# A test that uses one, directly or through other fixtures, is marked `slow`, so `make test-fast` (-m "not slow")
# leaves it out without anyone remembering to mark it. tests/test_test_layout.py checks that each one still exists.
SLOW_FIXTURES = {
    "tests.inventory.conftest.spawn": "Celery worker and beat processes",
    "tests.test_metrics_multiprocess.server": "gunicorn processes",
    "tests.conftest.prometheus": "a Prometheus process",
    "tests.browser.conftest.playwright_instance": "Chromium (Playwright)",
    "tests.kubesim.test_kubectl._kubectl": "kubectl",
    "tests.kubesim.test_enforcement_kinds.kubectl_installed": "kubectl",
    "tests.kubesim.test_enforcement_kinds.kubectl": "kubectl",
    "tests.deploy.conftest.base": "kubectl kustomize",
    "tests.deploy.conftest.overlay": "kubectl kustomize",
}


def slow_fixtures(item: pytest.Item) -> list[str]:
    """The SLOW_FIXTURES that `item` uses, directly or through other fixtures (its fixture closure)."""
    info = getattr(item, "_fixtureinfo", None)  # pytest Function items; doctest items have none
    if info is None:
        return []
    defined = {f"{fixturedef.func.__module__}.{fixturedef.argname}"
               for fixturedefs in info.name2fixturedefs.values() for fixturedef in fixturedefs}
    return sorted(defined & SLOW_FIXTURES.keys())


def _module_marks(path: Path) -> set[str]:
    """The marker names a test module's `pytestmark` puts on all its tests, read without importing the module."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return set()
    return {node.attr for statement in tree.body if isinstance(statement, ast.Assign)
            and any(isinstance(target, ast.Name) and target.id == "pytestmark" for target in statement.targets)
            for node in ast.walk(statement.value)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"}


def _matcher(present: set[str]) -> Callable[..., bool]:
    return lambda name, /, **kwargs: name in present


def module_ruled_out(path: Path, markexpr: str) -> bool:
    """Whether `-m markexpr` deselects every test of the module whatever marks its tests add to the module's: true
    for each combination of the expression's marker names that includes the module's."""
    from _pytest.mark.expression import Expression  # what -m itself evaluates

    marks = _module_marks(path)
    if not markexpr or not marks:
        return False
    expression = Expression.compile(markexpr)
    names = sorted(set(re.findall(r"[A-Za-z_]\w*", markexpr)) - {"and", "or", "not", "True", "False"} - marks)
    for chosen in itertools.product((False, True), repeat=len(names)):
        present = marks | {name for name, on in zip(names, chosen, strict=True) if on}
        if expression.evaluate(_matcher(present)):
            return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A test module marked as a whole (`pytestmark = pytest.mark.slow`) that `-m` rules out is not even imported:
    `make test-fast` would otherwise pay for collecting the API fuzzer's schema, the browser modules and the rest."""
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return module_ruled_out(collection_path, config.option.markexpr) or None
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if slow_fixtures(item):
            item.add_marker(pytest.mark.slow)
    unique_node_ids(items)


def unique_node_ids(items: list[pytest.Item]) -> None:
    """Every test's node id must be its own: pytest-xdist schedules by node id, and with `--dist loadfile` tests that
    share one run only once (the first), silently. Schemathesis names its items `test[GET /path]` but leaves their
    node id at the bare function's: give them the parent's id and their name, as pytest's own parametrize does. Any
    other duplicate stops the run with the ids."""
    for item in items:
        label = getattr(item, "operation_label", None)  # schemathesis.pytest.plugin.SchemathesisFunction
        if label and item.nodeid.endswith(f"::{item.originalname}"):  # type: ignore[attr-defined]
            item._id = item._id.with_params(label)  # pytest 9's structured node id: the params part
    seen: set[str] = set()
    duplicates = sorted({item.nodeid for item in items if item.nodeid in seen or seen.add(item.nodeid)})
    if duplicates:
        raise pytest.UsageError(f"{len(duplicates)} test node ids are not unique (pytest-xdist would run each once): "
                                + ", ".join(duplicates[:5]))


# pytest-xdist (`make test` runs with -n): the controller migrates one template database while the workers start and
# collect, and every worker's test database is a PostgreSQL copy of it (CREATE DATABASE ... TEMPLATE) instead of a
# migration run of its own (about 12 s of CPU each on these two cores). A worker waits for the template's "ready" file
# before copying it. Without -n nothing changes.
TEMPLATE_VARIABLE = "PORTAL_TEST_DB_TEMPLATE"
TEMPLATE_READY_VARIABLE = "PORTAL_TEST_DB_TEMPLATE_READY"
_template_builder = pytest.StashKey[threading.Thread]()


def _xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _build_template(config: pytest.Config, template: str, ready: Path) -> None:
    from django.conf import settings
    from django.db import connections
    from pytest_django.plugin import blocking_manager_key

    database = settings.DATABASES["default"]
    name, test = database["NAME"], database.setdefault("TEST", {})
    before = dict(test)
    test["NAME"] = template
    connection = connections["default"]  # this thread's own
    try:
        with config.stash[blocking_manager_key].unblock():
            connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    except BaseException as error:
        ready.write_text(f"the template database could not be built: {error!r}")
        raise
    finally:
        connection.close()
        database["NAME"] = connection.settings_dict["NAME"] = name
        test.clear()
        test.update(before)
    ready.write_text("ok")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _xdist_controller(session.config):
        return
    from django.conf import settings

    template = f"test_{settings.DATABASES['default']['NAME']}_template"
    ready = Path(tempfile.mkdtemp(prefix="portal-test-template-")) / "ready"
    os.environ[TEMPLATE_VARIABLE] = template  # the workers, started after this hook, inherit both
    os.environ[TEMPLATE_READY_VARIABLE] = str(ready)
    builder = threading.Thread(target=_build_template, args=(session.config, template, ready), daemon=True,
                               name="test-db-template")
    builder.start()
    session.config.stash[_template_builder] = builder


def _wait_for_template(ready: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not ready.exists() or not ready.read_text():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no template database after {timeout:.0f} s ({ready} never appeared)")
        time.sleep(0.2)
    if ready.read_text() != "ok":
        raise RuntimeError(ready.read_text())


def pytest_sessionfinish(session: pytest.Session) -> None:
    template = os.environ.get(TEMPLATE_VARIABLE)
    if not template or not _xdist_controller(session.config):
        return
    builder = session.config.stash.get(_template_builder, None)
    if builder is not None:
        builder.join(timeout=600)
    import psycopg
    from django.conf import settings
    from psycopg import sql

    database = settings.DATABASES["default"]
    with psycopg.connect(host=database["HOST"] or "127.0.0.1", port=database["PORT"] or 5432,
                         user=database["USER"], password=database["PASSWORD"] or None, dbname="postgres",
                         autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(template)))


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None,
                                 request: pytest.FixtureRequest) -> None:
    """pytest-django's hook before the test databases are created: a worker copies the controller's template."""
    template = os.environ.get(TEMPLATE_VARIABLE)
    if template and hasattr(request.config, "workerinput"):
        from django.conf import settings

        _wait_for_template(Path(os.environ[TEMPLATE_READY_VARIABLE]))
        settings.DATABASES["default"].setdefault("TEST", {})["TEMPLATE"] = template


def make_user(username: str, *roles: Role, superuser: bool = False) -> User:
    user = User.objects.create_user(username=username, password="pw", is_superuser=superuser, is_staff=superuser)
    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role.value)[0])
    return user


@pytest.fixture
def member(db: None) -> User:
    return make_user("member", Role.TENANT_MEMBER)


@pytest.fixture
def lead(db: None) -> User:
    return make_user("lead", Role.TENANT_LEAD, Role.TENANT_MEMBER)


@pytest.fixture
def approver(db: None) -> User:
    return make_user("approver", Role.APPROVER)


@pytest.fixture
def security_approver(db: None) -> User:
    return make_user("security", Role.SECURITY_APPROVER)


@pytest.fixture
def platform_admin(db: None) -> User:
    return make_user("admin", Role.PLATFORM_ADMIN, superuser=True)


@pytest.fixture
def finance(db: None) -> User:
    return make_user("finance", Role.FINANCE)


def sync_once(cluster: Any) -> None:
    """One full list-and-apply of the cluster, as the sync worker does, in this process."""
    from inventory.leases import lease_backend
    from inventory.services.clients import client_for
    from inventory.services.sync import cluster_sync_once

    client = client_for(cluster)
    backend = lease_backend()
    try:
        cluster_sync_once(cluster_id=cluster.pk, client=client, lease_for=lambda s: backend.acquire(s, 30))
    finally:
        client.close()


@contextlib.contextmanager
def live_cluster(scenario: Any, *, name: str, api: str | None = None) -> Iterator[tuple[Any, Any]]:
    """A kubesim scenario (builtin name or parsed dict) served, registered as cluster `name` and synced into the
    database, with the simulator still serving. `api`: a kubesim API profile other than the scenario's."""
    import redis
    import yaml
    from django.conf import settings

    from catalog.services.manifests import snapshot_forget
    from inventory.services.clusters import cluster_register
    from kubesim import Simulator

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    snapshot_forget()
    with Simulator(scenario=scenario, port=0, api=api) as sim:
        cluster = cluster_register(name=name, kubeconfig=yaml.safe_dump(sim.kubeconfig()))
        sync_once(cluster)
        yield sim, cluster
    snapshot_forget()


def _live(scenario: str) -> contextlib.AbstractContextManager[tuple[Any, Any]]:
    """A builtin kubesim scenario synced into the database, with the simulator still serving."""
    return live_cluster(scenario, name=scenario)


@pytest.fixture
def live_demo(transactional_db: None) -> Iterator[tuple[Any, Any]]:
    """The demo scenario synced into the database, with the simulator still serving (for dry runs and kubectl)."""
    with _live("demo") as live:
        yield live


@pytest.fixture
def live_sharing(transactional_db: None) -> Iterator[tuple[Any, Any]]:
    """kubesim's "sharing" scenario (renamed and strict time-slicing, MPS, DRA-backed nvidia.com/gpu) synced."""
    with _live("sharing") as live:
        yield live


@pytest.fixture
def demo_cluster(transactional_db: None) -> Any:
    """The demo scenario synced into the database once; the simulator is gone afterwards (tests read the inventory)."""
    import redis
    import yaml
    from django.conf import settings

    from inventory.services.clusters import cluster_register
    from kubesim import Simulator

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    with Simulator(scenario="demo", port=0) as sim:
        cluster = cluster_register(name="demo", kubeconfig=yaml.safe_dump(sim.kubeconfig()))
        sync_once(cluster)
    return cluster


@pytest.fixture
def handmade_cluster(db: None) -> Any:
    """A cluster with no simulator behind it, for objects made by hand (tests/inventory/factories.py) and fed in with
    `apply`. A module whose tests take `cluster` makes it this one with a local `cluster` fixture."""
    import redis
    from django.conf import settings

    from inventory.models import Cluster

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    return Cluster.objects.create(name="c1", kubeconfig="clusters: []")


@pytest.fixture
def apply(cluster: Any) -> Iterator[Callable[..., None]]:
    """`apply(kind, *objects, event="ADDED")`: objects into the test's `cluster` through the real watch-batch path
    (`_apply_events`), under one lease per kind, released at the end."""
    from inventory.k8s.types import WatchEvent
    from inventory.leases import Lease, lease_backend
    from inventory.services.sync import _apply_events, sync_state_for

    leases: dict[str, Lease] = {}

    def _apply(kind: str, *objects: dict[str, Any], event: str = "ADDED") -> None:
        if kind not in leases:
            leases[kind] = lease_backend().acquire(sync_state_for(cluster_id=cluster.pk, kind=kind), 60)
        _apply_events(cluster_id=cluster.pk, kind=kind, events=[WatchEvent(event, o) for o in objects],
                      lease=leases[kind])

    yield _apply
    for lease in leases.values():
        lease.release()


@pytest.fixture
def prometheus(tmp_path: Any) -> Iterator[Callable[..., Any]]:
    """Start Debian's Prometheus on an ephemeral port (`prometheus(scrape_interval=..., backfill=[files])`), its
    config and data under tmp_path; every instance started is stopped at the end."""
    from kubesim.prometheus import Prometheus
    from tests.tools import require_tool

    require_tool("prometheus")
    started: list[Prometheus] = []

    def start(*, sim: Any = None, cluster: str = "", scrape_interval: str = "1s",
              backfill: tuple[Any, ...] = ()) -> Prometheus:
        prom = Prometheus(tmp_path / f"prom{len(started)}", scrape_interval=scrape_interval)
        for path in backfill:
            prom.backfill(path)
        if sim is not None:
            prom.write_targets(sim.dcgm_targets(), cluster)
        started.append(prom)
        return prom.start()

    yield start
    for prom in started:
        prom.stop()
