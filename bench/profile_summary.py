"""Summarise a py-spy profile (raw collapsed stacks, `py-spy record --format raw`): where the samples go.

Each sample is charged to the innermost frame of the project's own code on its stack (`portal/`, `inventory/`,
`catalog/`, ... — not the libraries it calls), so the table says which of our functions the time is spent under,
Django's ORM and template rendering included. `--leaf` charges each sample to its innermost frame instead, `--library` to that frame's package (which part of
the stack the time is in: the ORM, waiting on PostgreSQL, DRF's fields, templates).

    .venv/bin/python bench/profile_summary.py /tmp/profile.txt [--top 25] [--leaf | --library] [--idle]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

LIBRARY = re.compile(r"\(([^/:]+(?:/[^/:.]+)?)")  # "(django/db/models/query.py:12)" -> "django/db"
OWN = re.compile(r"\((?:portal|inventory|catalog|core|audit|apitokens|integrations|kubesim)/[^)]*\)")
# Leaf frames of a thread with nothing to do (a gunicorn thread waiting for a request, the arbiter waiting for a
# signal, a selector): left out unless --idle. Waiting on PostgreSQL is not idle: it is part of a request's time.
IDLE = ("_worker (concurrent/futures/thread.py:81)", "wait_for_signals (gunicorn", "select (selectors.py",
        "poll (selectors.py", "accept (socket.py", "wait (threading.py", "sleep (gunicorn")


def summarise(path: Path, *, top: int, leaf: bool = False, library: bool = False,
              idle: bool = False) -> list[tuple[float, int, str]]:
    counts: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        frames = stack.split(";")
        if not idle and any(marker in frames[-1] for marker in IDLE):
            continue
        samples = int(number)
        total += samples
        if library:
            found = LIBRARY.search(frames[-1])
            key = found.group(1) if found else frames[-1]
        elif leaf:
            key = frames[-1]
        else:
            own = [frame for frame in frames if OWN.search(frame)]
            key = own[-1] if own else f"(outside the project) {frames[-1]}"
        counts[key] += samples
    return [(100 * n / max(total, 1), n, key) for key, n in counts.most_common(top)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--leaf", action="store_true", help="Charge each sample to its innermost frame.")
    parser.add_argument("--library", action="store_true", help="Charge each sample to the package (two levels) of "
                        "its innermost frame: the ORM, PostgreSQL waits, DRF fields, templates ...")
    parser.add_argument("--idle", action="store_true", help="Keep the samples of threads with nothing to do.")
    args = parser.parse_args()
    for share, samples, key in summarise(args.profile, top=args.top, leaf=args.leaf, library=args.library,
                                            idle=args.idle):
        print(f"{share:5.1f} % {samples:>7}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
