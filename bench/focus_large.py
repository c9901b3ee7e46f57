"""Benchmark: the FOCUS export of a month for `large`, built whole (the report's rows, then one CSV document) against
streamed (cb.focus_stream through csv_stream, as /api/v1/chargeback/focus/ answers now), each in a fresh process.

The same database as bench/chargeback_large.py (`large` synced, every offering priced, half of them changing price
mid-month, 20 tenants, a month of churn history). Both ways must produce the same bytes (SHA-256); the figures are
wall time, time to the first byte and the process's peak RSS, for a week and for the month, side by side in one run:
streamed, the peak should not grow with the window.

    .venv/bin/python bench/focus_large.py [--reuse]
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
from chargeback_large import _history, _prices_and_tenants
from sync_large import large_database, run_measured

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
WINDOWS = {"week": "2026-11-01,2026-11-08", "month": "2026-11-01,2026-12-01"}

EXPORT = """
import hashlib, json, time, datetime as dt, django
django.setup()
from portal.chargeback import services as cb
from portal.chargeback.csv_export import CSVRenderer, csv_stream
start, end = cb.parse_window(WINDOW)
now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
scope = cb.Scope(True, set())
digest, size, rows, first = hashlib.sha256(), 0, 0, None
t0 = time.perf_counter()
if MODE == "whole":
    found = cb.focus_rows(cb.pieces(start, end, step="month", scope=scope, now=now))
    rows = len(found)
    chunks = [CSVRenderer().render(found)]
else:
    def counted():
        global rows
        for row in cb.focus_stream(start, end, step="month", scope=scope, now=now):
            rows += 1
            yield row
    chunks = csv_stream(counted(), cb.FOCUS_COLUMNS)
for chunk in chunks:
    if first is None:
        first = time.perf_counter() - t0
    digest.update(chunk)
    size += len(chunk)
print(json.dumps({"seconds": round(time.perf_counter() - t0, 2), "first_byte_seconds": round(first, 2),
                  "rows": rows, "bytes": size, "sha256": digest.hexdigest()}))
"""


def _run(env: dict[str, str], mode: str, window: str) -> dict[str, object]:
    out = Path(tempfile.mkstemp(prefix="focus-")[1])
    code_text = EXPORT.replace("WINDOW", repr(window)).replace("MODE", repr(mode))
    with out.open("wb") as fh:
        seconds, rss_kib, code = run_measured([PY, "-c", code_text], env=env, stdout=fh.fileno())
    if code != 0:
        raise SystemExit(f"the {mode} export failed with {code}")
    result = json.loads(out.read_text().strip().splitlines()[-1])
    return {**result, "process_seconds": round(seconds, 2), "peak_rss_mb": round(rss_kib / 1024, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="portal_bench_chargeback")
    parser.add_argument("--reuse", action="store_true", help="Reuse an already synced database (e.g. bench/chargeback_large.py's).")
    args = parser.parse_args()
    env = large_database(args.db, reuse=args.reuse)
    subprocess.run([PY, "manage.py", "catalog_refresh", "--discover", "--no-capacity"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:  # idempotent: both replace what they add
        _prices_and_tenants(conn)
        _history(conn)
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:
        intervals = conn.execute("SELECT count(*) FROM inventory_allocationinterval").fetchone()[0]
    print(f"{intervals} allocation intervals", flush=True)
    _run(env, "streamed", WINDOWS["month"])  # resolves and freezes every resource's offering once (ChargeMapping)
    results: dict[str, object] = {"intervals": intervals}
    for name, window in WINDOWS.items():
        runs = {mode: _run(env, mode, window) for mode in ("whole", "streamed")}
        for mode, run in runs.items():
            results[f"{name}_{mode}"] = run
            print(name, mode, json.dumps(run), flush=True)
        if runs["whole"]["sha256"] != runs["streamed"]["sha256"]:
            raise SystemExit(f"{name}: the streamed export differs from the whole one")
    print(json.dumps(results, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "focus_large.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
