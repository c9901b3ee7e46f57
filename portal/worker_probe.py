"""Liveness probe of a Celery worker: `python -m portal.worker_probe NODE [--max-age SECONDS]`.

Exits 0 when the worker's heartbeat file (portal/heartbeat.py) was touched within --max-age seconds, 1 otherwise with
the reason on stderr. Reads only PORTAL_WORKER_HEARTBEAT_DIR from the environment: no Django, no broker, ~50 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_DIR = str(Path(tempfile.gettempdir()) / "portal-heartbeat")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.worker_probe", description=__doc__)
    parser.add_argument("node", help="the worker's node name, e.g. watch@$HOSTNAME")
    parser.add_argument("--max-age", type=float, default=300.0, help="seconds (default 300)")
    args = parser.parse_args(argv)
    path = Path(os.environ.get("PORTAL_WORKER_HEARTBEAT_DIR") or DEFAULT_DIR) / args.node.replace("/", "_")
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        sys.stderr.write(f"no heartbeat yet from {args.node} ({path})\n")
        return 1
    if age > args.max_age:
        sys.stderr.write(f"{args.node}: last heartbeat {age:.0f} s ago (more than {args.max_age:.0f} s)\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
