"""Run many simulation schedules outside pytest and print what ran (figures for notes).

    python -m tests.simulation.run --store memory --schedules 20000 --start 0
    python -m tests.simulation.run --store local --schedules 2000 --mode create-delete

Exits non-zero on the first violation, printing the seed and the schedule; replay one seed
with ``--start SEED --schedules 1``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter

from tests.simulation.sim import Config, Simulation, Violation

MODES = {
    "default": Config(),
    "create-delete": Config(create_concurrently=True, delete_rate=0.2),
    "many-writers": Config(writers=5, ops_per_writer=4, gc_runs=3, reads=5),
}


def store_factory(kind: str, root: str | None = None):
    """A store per schedule; a local one in a new directory under ``root``."""
    if kind == "memory":
        from kstore.io.memory import MemoryStore

        return MemoryStore
    if kind == "local":
        from kstore.io.local import LocalStore

        return lambda: LocalStore(tempfile.mkdtemp(prefix="kstore-sim-", dir=root))
    raise SystemExit(f"unknown store {kind!r} (memory, local; S3 runs in the pytest suite)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="memory")
    ap.add_argument("--schedules", type=int, default=1000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--mode", choices=sorted(MODES), default="default")
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="kstore-sim-run-")  # removed unless a schedule fails
    make = store_factory(args.store, root)
    faults: Counter = Counter()
    outcomes: Counter = Counter()
    committed: Counter = Counter()
    longest = (0, None)
    versions = reads = 0
    t0 = time.perf_counter()
    for seed in range(args.start, args.start + args.schedules):
        try:
            stats = Simulation(seed, make, MODES[args.mode]).run()
        except Violation as exc:
            print(exc, file=sys.stderr)
            print(f"the failing schedule's store is kept under {root}", file=sys.stderr)
            return 1
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root, exist_ok=True)
        faults.update(stats.faults)
        outcomes.update(stats.outcomes)
        committed.update(stats.committed)
        versions += stats.versions
        reads += stats.reads_checked
        if stats.steps > longest[0]:
            longest = (stats.steps, seed)
    shutil.rmtree(root, ignore_errors=True)
    print(f"{args.schedules} schedules ({args.store}, {args.mode}) in {time.perf_counter() - t0:.0f} s, 0 violations")
    print(f"faults injected: {dict(sorted(faults.items()))} (total {sum(faults.values())})")
    print(f"operations: {dict(sorted(outcomes.items()))}; versions committed: {versions}; reads checked: {reads}")
    print(f"versions by operation: {dict(sorted(committed.items()))}")
    print(f"longest schedule: {longest[0]} steps (seed {longest[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
