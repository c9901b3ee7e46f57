"""Benchmark: a month of chargeback for the `large` scenario with churn history, by tenant and offering.

Syncs `large` into its own PostgreSQL database (or reuses it with --reuse), runs catalog discovery (one offering per
distinct unit) and gives every offering a price (half of them change price mid-month), maps the namespaces to 20
tenants, and adds a month of churn history: for every day of the month, a third of the synced allocation intervals
again as closed intervals of 1-36 hours (about 10 times the live intervals). Then times the report the API computes for
`window=<month>&aggregate=tenant,offering&step=month` (pieces, aggregation, totals) in a fresh process, and checks
that the totals by tenant and by offering equal the overall total.

Then, in a second fresh process, the hourly rollups (portal/chargeback/rollups.py): the backfill of every hour since
the first interval, a check that the month's report read from them equals the engine's to the last decimal, and the
server time (in-process Django test client, no network) of the chargeback page and the aggregate API, first request
and p50/p99 over --page-runs requests each.

    .venv/bin/python bench/chargeback_large.py [--reuse]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_large import large_database, run_measured

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MONTH_START, MONTH_END = "2026-11-01T00:00:00+00:00", "2026-12-01T00:00:00+00:00"

REPORT = """
import json, time, datetime as dt, django
django.setup()
from portal.chargeback import services as cb
start, end = cb.parse_window("2026-11-01,2026-12-01")
now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
runs = []
for _ in range(RUNS):
    t0 = time.perf_counter()
    found = cb.pieces(start, end, step="month", scope=cb.Scope(True, set()), now=now)
    rows = cb.aggregate(found, ("tenant", "offering"))
    totals = cb.totals(found)
    runs.append(time.perf_counter() - t0)
by_tenant = sum(r["cost"] for r in cb.aggregate(found, ("tenant",)))
by_offering = sum(r["cost"] for r in cb.aggregate(found, ("offering",)))
total = sum(t["cost"] for t in totals)
assert by_tenant == by_offering == total, (by_tenant, by_offering, total)
print(json.dumps({"seconds": [round(r, 2) for r in runs], "pieces": len(found), "rows": len(rows),
                  "total_cost": str(total), "totals_equal": True}))
"""


ROLLUPS = """
import json, time, statistics, datetime as dt, django
django.setup()
from django.conf import settings
settings.ALLOWED_HOSTS.append("testserver")  # the in-process test client's host
from django.contrib.auth.models import Group, User
from django.test import Client
from portal.chargeback import rollups, services as cb
from portal.models import ChargeRollup, ChargeRollupDay
from portal.tenancy.roles import Role

t0 = time.perf_counter()
state = rollups.refresh()  # the backfill: every hour since the first interval, once
backfill = time.perf_counter() - t0
import resource, sys
backfill_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"backfill {backfill:.1f} s, peak RSS {backfill_rss_mb:.0f} MB", file=sys.stderr, flush=True)
start, end = cb.parse_window("2026-11-01,2026-12-01")
everything = cb.Scope(True, set())
found = cb.pieces(start, end, step="month", scope=everything, now=state.as_of)
for dimensions in (("tenant", "offering"), ("tenant",), ("namespace",), ()):
    assert rollups.report(start, end, step="month", dimensions=dimensions, scope=everything, state=state) == (
        cb.aggregate(found, dimensions)), dimensions
assert rollups.totals(start, end, scope=everything, state=state) == cb.totals(found)
finance = User.objects.filter(username="bench-finance").first() or User.objects.create_user("bench-finance")
finance.groups.add(Group.objects.get_or_create(name=Role.FINANCE.value)[0])
tenant_slug = "bench-3"
client = Client()
client.force_login(finance)
urls = {
    "chargeback page, November, all tenants": "/chargeback/?month=2026-11",
    "chargeback page, November, one tenant": "/chargeback/?month=2026-11&tenant=" + tenant_slug,
    "chargeback page, this month (rollups + the current hour)": "/chargeback/",
    "API month, tenant x offering": "/api/v1/chargeback/?window=2026-11-01,2026-12-01&aggregate=tenant,offering",
    "API month by day, namespace": "/api/v1/chargeback/?window=2026-11-01,2026-12-01&aggregate=namespace&step=day",
    "API month by hour, tenant": "/api/v1/chargeback/?window=2026-11-01,2026-12-01&aggregate=tenant&step=hour",
}
rollups.refresh(max_age=dt.timedelta(0))  # as the beat does every 30 s: the pages find the current hour fresh
# The process's own first request (imports, the template's first compile), as a running web worker has had: October.
assert client.get("/chargeback/?month=2026-10", secure=True).status_code == 200
timings = {}
for label, url in urls.items():
    runs = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        response = client.get(url, secure=True)  # production settings redirect plain HTTP
        runs.append(time.perf_counter() - t0)
        assert response.status_code == 200, (url, response.status_code)
    runs_sorted = sorted(runs)
    timings[label] = {"first_ms": round(runs[0] * 1000, 1), "p50_ms": round(statistics.median(runs) * 1000, 1),
                      "p99_ms": round(runs_sorted[min(len(runs) - 1, int(len(runs) * 0.99))] * 1000, 1)}
print(json.dumps({"backfill_seconds": round(backfill, 2), "backfill_peak_rss_mb": round(backfill_rss_mb),
                  "hour_rows": ChargeRollup.objects.count(),
                  "day_rows": ChargeRollupDay.objects.count(), "rollups_equal_engine": True, "pages": timings}))
"""


def _history(conn: psycopg.Connection) -> None:
    """A month of churn: each day, a third of the live intervals again as closed intervals of 1-36 hours."""
    conn.execute("DELETE FROM inventory_allocationinterval WHERE holder_uid LIKE '%%~h%%'")
    conn.execute("""
        INSERT INTO inventory_allocationinterval
            (cluster_id, holder_kind, holder_uid, namespace, name, node_name, resource, quantity, admin_access,
             consumed_capacity, share, started_at, ended_at, updated_at)
        SELECT i.cluster_id, i.holder_kind, i.holder_uid || '~h' || d, i.namespace, i.name || '-' || d, i.node_name,
               i.resource, i.quantity, i.admin_access, i.consumed_capacity, i.share,
               %(start)s::timestamptz + make_interval(days => d, hours => (i.id %% 24)::int),
               %(start)s::timestamptz + make_interval(days => d, hours => (i.id %% 24)::int + 1 + (i.id %% 36)::int),
               now()
        FROM inventory_allocationinterval i CROSS JOIN generate_series(0, 29) AS d
        WHERE i.id %% 3 = d %% 3 AND i.holder_uid NOT LIKE '%%~h%%'
    """, {"start": MONTH_START})


def _prices_and_tenants(conn: psycopg.Connection) -> None:
    conn.execute("DELETE FROM catalog_offeringprice")
    conn.execute("""
        INSERT INTO catalog_offeringprice (offering_id, unit_price, currency, effective_from, effective_to, created_at)
        SELECT id, 1 + id % 5, 'EUR', '2026-01-01T00:00:00+00:00',
               CASE WHEN id % 2 = 0 THEN '2026-11-15T00:00:00+00:00'::timestamptz END, now()
        FROM catalog_offering;
        INSERT INTO catalog_offeringprice (offering_id, unit_price, currency, effective_from, effective_to, created_at)
        SELECT id, 0.5 + id % 3, 'EUR', '2026-11-15T00:00:00+00:00', NULL, now()
        FROM catalog_offering WHERE id % 2 = 0;
        DELETE FROM portal_chargemapping;
        DELETE FROM portal_tenantnamespace;
        DELETE FROM portal_tenant WHERE slug LIKE 'bench-%%';
        INSERT INTO portal_tenant (slug, name, cost_center, quota_target, created_at)
        SELECT 'bench-' || n, 'Bench ' || n, 'CC-' || n, 'resourcequota', now() FROM generate_series(1, 20) AS n;
    """)
    conn.execute("""
        INSERT INTO portal_tenantnamespace (tenant_id, cluster_id, namespace, source)
        SELECT t.id, ns.cluster_id, ns.name, 'explicit'
        FROM (SELECT cluster_id, name, row_number() OVER (ORDER BY name) AS n
              FROM inventory_namespace WHERE deleted_at IS NULL) ns
        JOIN portal_tenant t ON t.slug = 'bench-' || (1 + ns.n % 20)
    """)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="portal_bench_chargeback")
    parser.add_argument("--reuse", action="store_true", help="Reuse an already synced database.")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep-rollups", action="store_true", help="Keep the rollups of an earlier run: the "
                        "'backfill' then rebuilds only what the re-inserted history marked dirty.")
    parser.add_argument("--page-runs", type=int, default=40, help="Requests per page or API call (in-process).")
    args = parser.parse_args()
    env = large_database(args.db, reuse=args.reuse)
    subprocess.run([PY, "manage.py", "catalog_refresh", "--discover", "--no-capacity"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:
        _prices_and_tenants(conn)
        _history(conn)
        if not args.keep_rollups:  # measure the backfill from nothing
            conn.execute("DELETE FROM portal_chargerollup; DELETE FROM portal_chargerollupday; "
                         "DELETE FROM portal_chargerollupstate; DELETE FROM portal_chargerollupdirty")
        intervals = conn.execute("SELECT count(*) FROM inventory_allocationinterval").fetchone()[0]
        offerings = conn.execute("SELECT count(*) FROM catalog_offering").fetchone()[0]
    print(f"{intervals} allocation intervals (live + a month of churn), {offerings} priced offerings", flush=True)
    out = Path(tempfile.mkstemp(prefix="chargeback-")[1])
    with out.open("wb") as fh:
        seconds, rss_kib, code = run_measured([PY, "-c", REPORT.replace("RUNS", str(args.runs))], env=env,
                                              stdout=fh.fileno())
    if code != 0:
        raise SystemExit(f"the report failed with {code}")
    report = json.loads(out.read_text().strip().splitlines()[-1])
    result = {"intervals": intervals, "offerings": offerings, **report,
              "best_seconds": min(report["seconds"]), "first_run_includes": "resolving and freezing the offering "
              "of every resource (ChargeMapping), done once", "process_peak_rss_mb": round(rss_kib / 1024, 1),
              "process_seconds": round(seconds, 2)}
    with out.open("wb") as fh:
        seconds, rss_kib, code = run_measured([PY, "-c", ROLLUPS.replace("RUNS", str(args.page_runs))], env=env,
                                              stdout=fh.fileno())
    if code != 0:
        raise SystemExit(f"the rollups run failed with {code}")
    result["rollups"] = {**json.loads(out.read_text().strip().splitlines()[-1]),
                         "process_peak_rss_mb": round(rss_kib / 1024, 1), "process_seconds": round(seconds, 2)}
    print(json.dumps(result, indent=2))
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "chargeback_large.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
