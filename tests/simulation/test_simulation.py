"""The deterministic simulation suite: invariants 1-2 under concurrency and faults.

CI runs 2,000 seeded schedules on memory and local-directory stores (chunks of 100 seeds,
spread over the xdist workers) and 20 on the moto S3 server. ``KSTORE_SIM_SCHEDULES=N``
runs N per store kind instead (``python -m tests.simulation.run`` runs more, outside
pytest, and prints the figures). A failure names the seed and prints the schedule;
``python -m tests.simulation.run --start SEED --schedules 1`` replays it.

The suite is also shown to catch broken protocols: with one safeguard switched off at a
time, a violation is found within the first few seeds.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from kstore.io.local import LocalStore
from kstore.io.memory import MemoryStore
from tests.simulation.sim import Config, Simulation, Stats, Violation

CHUNK = 100
_N = os.environ.get("KSTORE_SIM_SCHEDULES")
# (store kind, mode) -> schedules in CI: 2,000 on memory and local stores together
BUDGET = {
    ("memory", "default"): 1000,
    ("memory", "create-delete"): 500,
    ("local", "default"): 300,
    ("local", "create-delete"): 200,
}
if _N:
    BUDGET = {k: int(_N) for k in BUDGET}
MODES = {
    "default": Config(),
    "create-delete": Config(create_concurrently=True, delete_rate=0.2),
}


def _chunks() -> list[tuple[str, str, int]]:
    out = []
    for (kind, mode), n in BUDGET.items():
        out += [(kind, mode, start) for start in range(0, n, CHUNK)]
    return out


def _store(kind: str, root: Any) -> Callable[[], Any]:
    if kind == "memory":
        return MemoryStore
    return lambda: LocalStore(tempfile.mkdtemp(prefix="kstore-sim-", dir=root))


def _run(seeds: range, make: Callable[[], Any], config: Config) -> list[Stats]:
    return [Simulation(seed, make, config).run() for seed in seeds]


@pytest.mark.parametrize(("kind", "mode", "start"), _chunks(), ids=lambda v: str(v))
def test_schedules(kind, mode, start, tmp_path):
    n = min(CHUNK, BUDGET[(kind, mode)] - start)
    offset = 1_000_000 if mode != "default" else 0  # other seeds than the default mode's
    stats = _run(range(offset + start, offset + start + n), _store(kind, tmp_path), MODES[mode])
    assert len(stats) == n
    # the schedules did exercise faults, kills, commits and reads
    faults = sum((s.faults for s in stats), start=type(stats[0].faults)())
    assert {"error-before", "error-after", "kill-before", "kill-after", "slow"} <= set(faults)
    assert sum(s.outcomes["acked"] for s in stats) > n and sum(s.reads_checked for s in stats) > 0


def test_schedules_on_s3(s3_endpoint):
    import boto3

    from kstore.io.s3 import S3Store

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")

    def make() -> S3Store:
        bucket = f"kstore-sim-{uuid.uuid4().hex[:16]}"
        client.create_bucket(Bucket=bucket)
        return S3Store(bucket, endpoint_url=s3_endpoint, client=client)

    n = int(_N) if _N else 20
    stats = _run(range(5_000_000, 5_000_000 + n), make, Config())
    assert sum(s.outcomes["acked"] for s in stats) > n


def test_a_seed_replays_exactly():
    a = Simulation(7, MemoryStore)
    b = Simulation(7, MemoryStore)
    a.run()
    b.run()
    assert a.sched.trace == b.sched.trace and len(a.sched.trace) > 50


# ---------------------------------------------------------------------------------------
# the suite catches broken protocols
# ---------------------------------------------------------------------------------------


def _no_orphan_check(mp):
    import kstore.blocks.commit as commit

    mp.setattr(commit, "_check_orphan_cutoff", lambda *a, **k: None)


def _no_claim_confirmation(mp):
    import kstore.blocks.commit as commit

    def claim(store, key, data, entry):  # the old way: an error means "lost"
        try:
            return store.put_if_absent(key, data)
        except Exception:
            return False

    mp.setattr(commit, "_claim", claim)


def _no_gc_fence(mp):
    import kstore.blocks.gc as gc
    from kstore.blocks.commit import Committed

    mp.setattr(gc, "commit", lambda *a, **k: Committed(None, None))


def _without_scope(module):
    real = module.commit
    return lambda st, uuid, op, **kw: real(st, uuid, op, **{k: v for k, v in kw.items() if k != "scope"})


def _no_delete_rows_conflict_scope(mp):
    import kstore.blocks.mutate as mutate

    mp.setattr(mutate, "commit", _without_scope(mutate))


def _no_overwrite_conflict_scope(mp):
    """Overwrites and delete scopes (eager, or typed operations of a stale snapshot) commit
    without checking that no file was added inside their scope since the version they read."""
    import kstore.blocks.job as job

    mp.setattr(job, "commit", _without_scope(job))


@pytest.mark.parametrize("breakage", [_no_orphan_check, _no_claim_confirmation, _no_gc_fence,
                                      _no_delete_rows_conflict_scope, _no_overwrite_conflict_scope],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_simulation_catches_a_broken_protocol(monkeypatch, breakage):
    breakage(monkeypatch)
    with pytest.raises(Violation, match=r"seed \d+: "):
        for seed in range(60):
            Simulation(seed, MemoryStore, Config(retentions=(timedelta(0), timedelta(seconds=2)))).run()
