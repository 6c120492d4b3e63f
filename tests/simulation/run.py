"""Run many simulation schedules outside pytest and print what ran (figures for notes).

    python -m tests.simulation.run --store memory --schedules 20000 --start 0
    python -m tests.simulation.run --store local --schedules 2000 --mode create-delete
    python -m tests.simulation.run --mode held-creates --schedules 200 --keep-going
    python -m tests.simulation.run --mode mixed --schedules 5000 --start 3000000
    python -m tests.simulation.run --clock-skew --pause-rate 0.03 --schedules 100

Exits non-zero on the first violation, printing the seed and the schedule; replay one seed
with ``--start SEED --schedules 1`` (and the same mode and flags). With ``--keep-going`` it
runs every schedule and prints each distinct violation once (its first seed and how many
schedules showed it).

The modes ``restores`` and ``row-changes`` (#33) add restores, merges and updates (some on
snapshots) to the writers' operations; ``renames`` adds column renames (x <-> y) and type widenings (double row ids into the int64 column) beside them. The fault kinds of issue #29 are modes (``--mode
clock-skew|pauses|held-creates|recreate|damaged-derived``) and flags that add them to any mode: ``--clock-skew``, ``--pause-rate``,
``--held-rate``, ``--recreate``, ``--damage-rate`` (``--damage-kinds``, ``--damage-targets``);
``--gc-runs`` sets how many garbage collections run per schedule.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace

from tests.simulation.sim import FAULT_KINDS, Config, Simulation, Violation

MODES = {
    "default": Config(),
    "create-delete": Config(create_concurrently=True, delete_rate=0.2),
    "many-writers": Config(writers=5, ops_per_writer=4, gc_runs=3, reads=5),
    # each schedule draws which fault kinds of issue #29 it adds (the CI suite's mixed modes)
    "mixed": Config(mix_fault_kinds=True),
    "create-delete-mixed": Config(create_concurrently=True, delete_rate=0.2, mix_fault_kinds=True),
    **FAULT_KINDS,
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


def config_of(args: argparse.Namespace) -> Config:
    """The mode's configuration with the fault-kind flags added."""
    config = MODES[args.mode]
    extra = {}
    if args.clock_skew:
        extra["clock_skew"] = True
    if args.pause_rate is not None:
        extra["pause_rate"] = args.pause_rate
    if args.held_rate is not None:
        extra["held_rate"] = args.held_rate
    if args.recreate is not None:
        extra["recreate_cycles"] = args.recreate
        if args.recreate and config.snapshot_rate < 0.8:
            extra["snapshot_rate"] = 0.8
    if args.damage_rate is not None:
        extra["damage_rate"] = args.damage_rate
    if args.damage_targets:
        extra["damage_targets"] = tuple(k.strip() for k in args.damage_targets.split(",") if k.strip())
    if args.gc_runs is not None:
        extra["gc_runs"] = args.gc_runs
    if args.damage_kinds:
        extra["damage_kinds"] = tuple(k.strip() for k in args.damage_kinds.split(",") if k.strip())
    return replace(config, **extra)


def signature(message: str) -> str:
    """A violation's first line without its numbers, keys and ids (to group equal ones)."""
    first = message.split("\n", 1)[0]
    first = re.sub(r"^seed \d+: ", "", first)
    first = re.sub(r"k[0-9a-f]{11}_[0-9a-f]{20}", "<file>", first)
    first = re.sub(r"\b[0-9a-f]{32}\b", "<id>", first)
    first = re.sub(r"\([^()]*\)", "(...)", first)
    return re.sub(r"\d+", "N", first)[:240]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="memory")
    ap.add_argument("--schedules", type=int, default=1000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--mode", choices=sorted(MODES), default="default")
    ap.add_argument("--clock-skew", action="store_true", help="per-actor wall-clock offsets (minutes to days)")
    ap.add_argument("--pause-rate", type=float, help="chance per step of pausing the actor 16 min .. 4 h")
    ap.add_argument("--held-rate", type=float, help="chance that a put_if_absent is held and lands later")
    ap.add_argument("--recreate", type=int, metavar="CYCLES",
                    help="delete and re-create the dataset CYCLES times under stale snapshots")
    ap.add_argument("--damage-rate", type=float, help="chance that a derived file is damaged after its put")
    ap.add_argument("--damage-kinds", help="comma-separated: truncate, empty, garbage, flip, stale-hint")
    ap.add_argument("--damage-targets", help="comma-separated: checkpoint, _last_checkpoint, history summary, "
                                             "main file, _common_metadata, sorted index blocks")
    ap.add_argument("--gc-runs", type=int, help="garbage collections (or deletes) per schedule")
    ap.add_argument("--keep-going", action="store_true", help="run every schedule; summarize the violations")
    args = ap.parse_args(argv)
    config = config_of(args)
    root = tempfile.mkdtemp(prefix="kstore-sim-run-")  # removed unless a schedule fails
    make = store_factory(args.store, root)
    faults: Counter = Counter()
    outcomes: Counter = Counter()
    committed: Counter = Counter()
    longest = (0, None)
    versions = reads = 0
    found: dict[str, list] = {}  # signature -> [first seed, count, first message]
    t0 = time.perf_counter()
    for seed in range(args.start, args.start + args.schedules):
        sim = Simulation(seed, make, config)
        try:
            stats = sim.run()
        except Violation as exc:
            if not args.keep_going:
                print(exc, file=sys.stderr)
                print(f"the failing schedule's store is kept under {root}", file=sys.stderr)
                return 1
            sig = signature(str(exc))
            found.setdefault(sig, [seed, 0, str(exc)])[1] += 1
            print(f"seed {seed}: {str(exc).split(chr(10), 1)[0][len(f'seed {seed}: '):][:300]}", file=sys.stderr)
            stats = sim.stats
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
    bad = sum(n for _, n, _ in found.values())
    print(f"{args.schedules} schedules ({args.store}, {args.mode}) in {time.perf_counter() - t0:.0f} s, "
          f"{bad} violation(s)")
    print(f"faults injected: {dict(sorted(faults.items()))} (total {sum(faults.values())})")
    print(f"operations: {dict(sorted(outcomes.items()))}; versions committed: {versions}; reads checked: {reads}")
    print(f"versions by operation: {dict(sorted(committed.items()))}")
    print(f"longest schedule: {longest[0]} steps (seed {longest[1]})")
    if found:
        print(f"{len(found)} distinct violation(s) (first seed, schedules showing it):")
        for sig, (seed, n, _) in sorted(found.items(), key=lambda kv: -kv[1][1]):
            print(f"  seed {seed} (x{n}): {sig}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
