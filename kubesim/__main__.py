"""Command line: ``python -m kubesim --scenario demo --port 6443``."""

from __future__ import annotations

import argparse
import http.client
import signal
import sys
import threading

from .apis import PROFILES
from .server import CONTROL_RESTORE, Simulator


def _restore(host: str, port: int) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("POST", CONTROL_RESTORE)
        response = conn.getresponse()
        body = response.read().decode(errors="replace")
    except OSError as exc:
        sys.stderr.write(f"kubesim: cannot reach http://{host}:{port}: {exc}\n")
        return 1
    finally:
        conn.close()
    sys.stdout.write(body + "\n")
    return 0 if response.status == 200 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubesim", description="Kubernetes API simulator")
    parser.add_argument("--scenario", default="demo", help="scenario name (demo, large, empty, upstream, sharing, ...) or YAML path")
    parser.add_argument(
        "--api", default=None, choices=sorted(PROFILES), help="API profile (default: the scenario's apiServer, else current)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-kubeconfig", metavar="PATH", default=None)
    parser.add_argument("--churn", type=float, default=0.0, metavar="RATE", help="changes per second (0 = off)")
    parser.add_argument("--history-limit", type=int, default=100_000)
    parser.add_argument(
        "--restore", action="store_true",
        help="do not serve: tell the simulator at --host/--port to simulate an etcd restore (store and resourceVersion "
        "counter start over from its scenario, objects get new uids) and exit",
    )
    args = parser.parse_args(argv)
    if args.restore:
        return _restore(args.host, args.port)

    sim = Simulator(
        scenario=args.scenario, host=args.host, port=args.port, seed=args.seed, history_limit=args.history_limit,
        api=args.api,
    ).start()
    stop = threading.Event()

    def _on_signal(signum, frame):
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGTERM, _on_signal)
    if args.write_kubeconfig:
        sim.write_kubeconfig(args.write_kubeconfig)
    if args.churn > 0:
        sim.churn.start(rate_per_second=args.churn, seed=args.seed)
    counts = ", ".join(f"{p}={sim.store.count(p)}" for p in ("nodes", "pods", "resourceslices", "resourceclaims"))
    sys.stdout.write(f"kubesim serving {sim.url} as Kubernetes {sim.api.git_version} ({sim.api.name}; {counts})\n")
    sys.stdout.flush()
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
