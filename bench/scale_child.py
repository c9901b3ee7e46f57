"""One simulated cluster for bench/scale_clusters.py: kubesim's Simulator in this process, driven over stdin/stdout.

Loads the scenario, serves it on --port, writes its kubeconfig and prints one JSON line `{"ready": true, …}` (the
object counts of the kinds kubectl lists in bench/sync_large.py, the load time). Then reads commands on stdin:

* `churn RATE`: start the simulator's churn at RATE changes per second (seeded with --seed) and stream every churn
  write of pods, nodes and ResourceSlices (as bench/watch_lag.py's Recorder records them) as one JSON line each,
  `{"kind": …, "uid": …, "rv": …, "deleted": …, "t": <time.time() of the write>}`, flushed every 20 ms;
* `stop`: stop the churn, flush what is left, print `{"stopped": true, "changes": …, "seconds": …}` (the changes the
  churn made and over how long);
* `quit` (or end of input): stop serving and exit.

    .venv/bin/python bench/scale_child.py --scenario demo --port 0 --kubeconfig /tmp/c1.kubeconfig --name c1
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from sync_large import KINDS  # noqa: E402
from watch_lag import Recorder  # noqa: E402

from kubesim import Simulator  # noqa: E402


class Stream:
    """Writes the recorder's pending churn writes to stdout as JSON lines; one writer at a time."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.lock = threading.Lock()

    def emit(self, message: dict) -> None:
        with self.lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def drain(self) -> None:
        with self.recorder.lock:
            batch = list(self.recorder.pending)
            self.recorder.pending.clear()
        if not batch:
            return
        lines = "".join(json.dumps({"kind": kind, "uid": uid, "rv": rv, "deleted": deleted, "t": changed_at}) + "\n"
                        for kind, uid, rv, deleted, changed_at in batch)
        with self.lock:
            sys.stdout.write(lines)
            sys.stdout.flush()

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(0.02):
            self.drain()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="demo")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--name", default="c1", help="The cluster's name (in messages only).")
    parser.add_argument("--seed", type=int, default=0, help="The churn's seed.")
    args = parser.parse_args()

    started = time.monotonic()
    sim = Simulator(scenario=args.scenario, port=args.port).start()
    recorder = Recorder(sim)
    stream = Stream(recorder)
    sim.write_kubeconfig(args.kubeconfig)
    stream.emit({"ready": True, "name": args.name, "url": sim.url, "load_seconds": round(time.monotonic() - started, 2),
                 "objects": {kind: sim.store.count(kind) for kind in KINDS}})
    stop = threading.Event()
    threading.Thread(target=stream.run, args=(stop,), name="stream", daemon=True).start()
    churn_started, changes_before = time.monotonic(), 0
    try:
        for line in sys.stdin:
            command, *rest = line.split() or [""]
            if command == "churn":
                recorder.active = True
                churn_started, changes_before = time.monotonic(), sim.churn.changes
                sim.churn.start(rate_per_second=float(rest[0]), seed=args.seed)
            elif command == "stop":
                sim.churn.stop()
                recorder.active = False
                stream.drain()  # every write recorded so far goes out before the "stopped" line
                stream.emit({"stopped": True, "name": args.name, "changes": sim.churn.changes - changes_before,
                             "seconds": round(time.monotonic() - churn_started, 3)})
            elif command == "quit":
                break
    finally:
        stop.set()
        sim.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
