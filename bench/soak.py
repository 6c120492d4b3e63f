"""Mixed-workload soak: real processes write, collect garbage and read one dataset at once.

    .venv/bin/python bench/soak.py --store local --minutes 10
    .venv/bin/python bench/soak.py --store s3 --minutes 10      # moto S3 server on 127.0.0.1

Writers (processes) loop over appends, overwrite_partitions, delete_scope, delete_rows and
build_indices, each tagged with its own ``txn`` and retried (same txn) after a failure; a GC
process collects with the default 7-day retention in a loop; readers read the newest version
and record what they saw. ``--kill-every S`` SIGKILLs a random writer every S seconds (it is
restarted). At the end every version is replayed against a row model (the simulation's
oracle, ``tests.simulation.sim.Op``): the figures printed are acknowledged rows lost,
version numbers claimed twice, and reads that differ from the version they read — all must
be 0 (exit status 1 otherwise).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

UUID = "soak"
PARTS = [f"p{i}" for i in range(8)]


def _digest(rids) -> str:
    return hashlib.sha256(",".join(map(str, sorted(rids))).encode()).hexdigest()[:16]


# -- worker processes ---------------------------------------------------------------------


def writer(url: str, w: int, out: Path, stop: Path, seed: int) -> None:
    import pandas as pd

    import kstore
    from kstore.errors import CommitStateUnknownError, KstoreError

    rng = random.Random(seed)
    seq = 0
    with out.open("a") as log:
        while not stop.exists():
            seq += 1
            tag = [f"w{w}-{seed}", seq]
            kind = rng.choices(["append", "overwrite", "delete_scope", "delete_rows", "build_indices"],
                               [60, 15, 10, 10, 5])[0]
            rows = [[seed * 10_000_000 + seq * 10 + k, rng.choice(PARTS), rng.randrange(10)]
                    for k in range(rng.randint(1, 4))]
            if kind == "overwrite":
                p = rng.choice(PARTS)
                rows = [[r, p, x] for r, _, x in rows]
            op = {"tag": tag, "kind": kind, "rows": rows if kind in ("append", "overwrite") else [],
                  "partition": rng.choice(PARTS), "x": rng.randrange(10)}
            frame = pd.DataFrame({"p": [r[1] for r in rows], "rid": [r[0] for r in rows], "x": [r[2] for r in rows]})
            txn = (tag[0], tag[1])
            log.write(json.dumps(dict(op, outcome="pending")) + "\n")  # a SIGKILL leaves it pending
            log.flush()
            outcome, version, error = "failed", None, ""
            for _ in range(3):
                try:
                    if kind == "append":
                        meta = kstore.update_dataset(url, UUID, frame, txn=txn)
                    elif kind == "overwrite":
                        meta = kstore.update_dataset(url, UUID, frame, mode="overwrite_partitions", txn=txn)
                    elif kind == "delete_scope":
                        meta = kstore.update_dataset(url, UUID, delete_scope=[{"p": op["partition"]}], txn=txn)
                    elif kind == "delete_rows":
                        meta = kstore.delete_rows(url, UUID, [[("x", "==", op["x"])]], txn=txn)
                    else:
                        meta = kstore.build_indices(url, UUID, ["x"], txn=txn)
                    outcome, version = "acked", meta.version
                    break
                except CommitStateUnknownError as exc:
                    outcome, version, error = ("acked" if exc.committed else "unknown"), exc.version, str(exc)
                    break
                except KstoreError as exc:
                    outcome, error = "failed", f"{type(exc).__name__}: {exc}"[:300]
            op.update(outcome=outcome, version=version, error=error)
            log.write(json.dumps(op) + "\n")
            log.flush()


def gc_loop(url: str, out: Path, stop: Path, retention_s: float) -> None:
    from datetime import timedelta

    import kstore
    from kstore.errors import KstoreError

    retention = timedelta(seconds=retention_s)
    with out.open("a") as log:
        while not stop.exists():
            try:
                r = kstore.garbage_collect(url, UUID, retention=retention, enforce_retention_duration=False)
                log.write(json.dumps({"deleted": len(r.deleted_files), "fence": r.fence_version}) + "\n")
            except KstoreError as exc:
                log.write(json.dumps({"error": str(exc)[:300]}) + "\n")
            log.flush()
            time.sleep(random.uniform(0.5, 2))


def reader(url: str, out: Path, stop: Path) -> None:
    import kstore
    from kstore.blocks.read import read_plan
    from kstore.errors import KstoreError

    with out.open("a") as log:
        while not stop.exists():
            try:
                plan = kstore.plan_read(url, UUID)
                table = read_plan(kstore.open_store(url), plan, ["rid"])
                log.write(json.dumps({"version": plan.version, "digest": _digest(table.column("rid").to_pylist()),
                                      "rows": table.num_rows}) + "\n")
            except KstoreError as exc:
                log.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}) + "\n")
            log.flush()


# -- the driver ---------------------------------------------------------------------------


def spawn(role: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--role", role, *args], cwd=ROOT)


def verify(url: str, work: Path) -> dict:
    import kstore
    from kstore.blocks import load
    from tests.simulation.sim import Op

    st = kstore.open_store(url)
    ops: dict[tuple[str, int], dict] = {}
    for f in work.glob("w*.jsonl"):
        for line in f.read_text().splitlines():
            o = json.loads(line)
            ops[tuple(o["tag"])] = o
    versions = load.log_versions(st, UUID)
    model = None
    by_tag: dict[tuple, list[int]] = {}
    anomalies, duplicates = [], 0
    digests: dict[int, str] = {}
    parent_seen = set()
    expired = 0
    for v in versions:
        entry = load.load_entry(st, UUID, v)
        if entry.parent is not None and entry.parent != v - 1:
            duplicates += 1
        if entry.parent in parent_seen:
            duplicates += 1
        parent_seen.add(entry.parent)
        if entry.metadata is None and not entry.expired:
            model = None if entry.deletes_dataset else model
            continue
        tag = tuple(entry.txn) if entry.txn else None
        if entry.operation == "vacuum":
            pass
        elif entry.operation == "create":
            model = frozenset(tuple(r) for r in ops.get(tag, {}).get("rows", [])) if tag in ops else None
        else:
            o = ops.get(tag)
            if o is None:
                anomalies.append(f"version {v}: unknown transaction {tag}")
                continue
            by_tag.setdefault(tag, []).append(v)
            kind = o["kind"]
            model = Op(kind, tag, rows=tuple(tuple(r) for r in o["rows"]), partition=o["partition"],
                       x=o["x"]).apply(model)
        if entry.expired:
            expired += 1
            continue  # expired by GC: the model goes on, the data is gone
        table = kstore.read_table(url, UUID, version=v, columns=["rid", "p", "x"])
        got = frozenset(zip(table.column("rid").to_pylist(), table.column("p").to_pylist(),
                            table.column("x").to_pylist()))
        if model is not None and got != model:
            anomalies.append(f"version {v} ({entry.operation}) differs from the model: "
                             f"missing {len(model - got)}, extra {len(got - model)}")
            model = got
        digests[v] = _digest(r[0] for r in got)
    lost = sum(len(o["rows"]) for t, o in ops.items() if o["outcome"] == "acked" and o["kind"] in ("append", "overwrite")
               and not by_tag.get(t))
    double = sum(1 for vs in by_tag.values() if len(vs) > 1)
    failed_but_committed = sum(1 for t, o in ops.items() if o["outcome"] == "failed" and by_tag.get(t))
    reads = bad_reads = read_errors = unverifiable = 0
    for f in work.glob("r*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if "error" in r:
                read_errors += 1
                continue
            reads += 1
            if r["version"] not in digests:
                unverifiable += 1  # the version expired since
            elif digests[r["version"]] != r["digest"]:
                bad_reads += 1
    gc_runs = sum(len(f.read_text().splitlines()) for f in work.glob("gc*.jsonl"))
    outcomes = Counter(o["outcome"] for o in ops.values())
    kinds = Counter(o["kind"] for o in ops.values() if o["outcome"] == "acked")
    return {"versions": len(versions), "operations": dict(outcomes), "acked_by_kind": dict(kinds),
            "acked_rows_lost": lost, "versions_claimed_twice": duplicates, "ops_committed_twice": double,
            "failed_but_committed": failed_but_committed, "model_anomalies": anomalies[:10],
            "reads": reads, "reads_differing_from_their_version": bad_reads, "read_errors": read_errors,
            "reads_of_versions_expired_since": unverifiable, "versions_expired": expired, "gc_runs": gc_runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", choices=["local", "s3"], default="local")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--kill-every", type=float, default=0, help="SIGKILL a random writer every S seconds")
    ap.add_argument("--gc-retention", type=float, default=7 * 86400, help="GC retention in seconds (default 7 days)")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role:
        url, out, stop = a.args[0], Path(a.args[1]), Path(a.args[2])
        if a.role == "writer":
            writer(url, int(a.args[3]), out, stop, int(a.args[4]))
        elif a.role == "gc":
            gc_loop(url, out, stop, float(a.args[3]))
        else:
            reader(url, out, stop)
        return 0

    import pandas as pd

    import kstore

    work = Path(tempfile.mkdtemp(prefix="kstore-soak-"))
    server = None
    if a.store == "s3":
        import boto3

        from tests.s3_server import S3Server

        server = S3Server()
        endpoint = server.start()
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="soak")
        url = f"s3://soak/data?endpoint_url={endpoint}"
    else:
        url = str(work / "store")
    init = pd.DataFrame({"p": PARTS, "rid": range(len(PARTS)), "x": range(len(PARTS))})
    kstore.store_dataset(url, UUID, init, partition_on="p", secondary_indices="x", txn=("init", 1))
    with (work / "winit.jsonl").open("w") as f:
        f.write(json.dumps({"tag": ["init", 1], "kind": "create", "rows": init[["rid", "p", "x"]].values.tolist(),
                            "partition": None, "x": None, "outcome": "acked", "version": 0}) + "\n")
    stop = work / "STOP"
    procs: dict[str, subprocess.Popen] = {}
    seeds = iter(range(1, 10**6))

    def start_writer(w: int) -> None:
        procs[f"w{w}"] = spawn("writer", url, str(work / f"w{w}-{len(procs)}.jsonl"), str(stop), str(w), str(next(seeds)))

    for w in range(a.writers):
        start_writer(w)
    procs["gc"] = spawn("gc", url, str(work / "gc.jsonl"), str(stop), str(a.gc_retention))
    for r in range(a.readers):
        procs[f"r{r}"] = spawn("reader", url, str(work / f"r{r}.jsonl"), str(stop))
    t_end = time.time() + a.minutes * 60
    kills = 0
    next_kill = time.time() + a.kill_every if a.kill_every else float("inf")
    while time.time() < t_end:
        time.sleep(0.5)
        if time.time() >= next_kill:
            w = random.randrange(a.writers)
            procs[f"w{w}"].send_signal(signal.SIGKILL)
            procs[f"w{w}"].wait()
            kills += 1
            start_writer(w)
            next_kill = time.time() + a.kill_every
    stop.touch()
    for p in procs.values():
        p.wait(300)
    report = verify(url, work)
    report.update(store=a.store, minutes=a.minutes, writers=a.writers, readers=a.readers, writer_kills=kills,
                  gc_retention_s=a.gc_retention)
    print(json.dumps(report, indent=1))
    if server is not None:
        server.stop()
    bad = (report["acked_rows_lost"] or report["versions_claimed_twice"] or report["ops_committed_twice"]
           or report["failed_but_committed"] or report["model_anomalies"] or report["reads_differing_from_their_version"])
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
