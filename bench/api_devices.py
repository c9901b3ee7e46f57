"""Benchmark: `GET /api/v1/devices/?limit=100` on the `large` inventory vs a trivial endpoint on the same server.

Both endpoints are served by the same gunicorn (production settings) from a database holding the synced and
derived `large` scenario (bench/sync_large.py or bench/watch_lag.py leave one behind; or pass --prepare). The
trivial endpoint is the DRF API root (`/api/v1/`): same authentication, middleware and renderer, no query.
They are measured alternately (trivial, devices, trivial, devices) with the same client concurrency; the ratio uses
the means. Target (DESIGN.md §5): devices ≥ 40 % of the trivial endpoint's requests/s.

    .venv/bin/python bench/api_devices.py [--db portal_bench] [--seconds 10] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def login(port: int, username: str, password: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/login/")
    response = conn.getresponse()
    page = response.read().decode()
    csrf_cookie = re.search(r"csrftoken=([^;]+)", response.getheader("Set-Cookie") or "").group(1)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    body = f"username={username}&password={password}&csrfmiddlewaretoken={token}"
    conn.request("POST", "/login/", body=body, headers={
        "Content-Type": "application/x-www-form-urlencoded", "Cookie": f"csrftoken={csrf_cookie}",
        "Referer": f"http://127.0.0.1:{port}/login/"})
    response = conn.getresponse()
    response.read()
    session = re.search(r"sessionid=([^;]+)", response.getheader("Set-Cookie") or "")
    if not session:
        raise SystemExit("login failed")
    return f"sessionid={session.group(1)}"


def load(port: int, path: str, cookie: str, seconds: float, concurrency: int) -> tuple[float, int]:
    """Requests per second over `seconds` with `concurrency` keep-alive connections; every answer must be 200."""
    counts = [0] * concurrency
    errors: list[str] = []
    deadline = time.monotonic() + seconds

    def worker(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < deadline:
            conn.request("GET", path, headers={"Cookie": cookie, "Accept": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                errors.append(f"{path}: HTTP {response.status}")
                return
            counts[index] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(errors[0])
    return sum(counts) / (time.monotonic() - started), sum(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="portal_bench")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "DJANGO_SECRET_KEY": "bench",
           "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{args.db}", "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
           "DJANGO_SECURE": "false", "REDIS_URL": "redis://127.0.0.1:6379/13", "PORTAL_LOG_LEVEL": "WARNING"}
    subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([PY, "manage.py", "derive"], cwd=ROOT, env=env, check=True)  # documents of the current code
    create_user = (
        "from django.contrib.auth.models import User;"
        "u, _ = User.objects.get_or_create(username='bench');"
        "u.is_superuser = True; u.set_password('bench-password'); u.save()"
    )
    subprocess.run([PY, "manage.py", "shell", "-c", create_user], cwd=ROOT, env=env, check=True)
    count = subprocess.run(
        [PY, "manage.py", "shell", "-c", "from inventory.models import Device; print(Device.objects.count())"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    if int(count or 0) < 1000:
        raise SystemExit(f"database {args.db} holds {count} devices: run bench/sync_large.py first")

    port = free_port()
    server = subprocess.Popen(
        [str(Path(PY).parent / "gunicorn"), "portal.wsgi", "--bind", f"127.0.0.1:{port}", "--workers",
         str(args.workers), "--log-level", "warning"], cwd=ROOT, env=env, start_new_session=True)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.2)
        cookie = login(port, "bench", "bench-password")
        trivial_path, devices_path = "/api/v1/", "/api/v1/devices/?limit=100"
        load(port, trivial_path, cookie, 2, args.concurrency)  # warm up both
        load(port, devices_path, cookie, 2, args.concurrency)
        runs: dict[str, list[float]] = {trivial_path: [], devices_path: []}
        for _round in range(2):
            for path in (trivial_path, devices_path):
                rate, _n = load(port, path, cookie, args.seconds, args.concurrency)
                runs[path].append(rate)
                print(f"{path:<32} {rate:8.1f} req/s", flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)

    trivial = sum(runs[trivial_path]) / len(runs[trivial_path])
    devices = sum(runs[devices_path]) / len(runs[devices_path])
    result = {"devices_in_db": int(count), "trivial_rps": round(trivial, 1), "devices_limit100_rps": round(devices, 1),
              "ratio": round(devices / trivial, 3), "target_ratio": 0.4,
              "runs": {k: [round(v, 1) for v in vs] for k, vs in runs.items()}}
    print(json.dumps(result, indent=2))
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "api_devices.json").write_text(json.dumps(result, indent=2))
    print("target met" if result["ratio"] >= 0.4 else "TARGET MISSED")
    return 0 if result["ratio"] >= 0.4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
