"""Mixed-workload soak: real processes write, compact, collect garbage and read one dataset at once.

The soak of issue #29 (10 minutes each, with SIGKILLs; every must-be-0 figure must be 0)::

    .venv/bin/python bench/soak.py --store local --minutes 10 --kill-every 10 --gc-retention 0
    .venv/bin/python bench/soak.py --store s3 --minutes 10 --kill-every 10 --gc-retention 0 \\
        --proxy-faults 0.05 --s3-client mixed
    .venv/bin/python bench/soak.py --store s3 --proxy-faults 0.05 --s3-client s3store   # one constructor only
    .venv/bin/python bench/soak.py --store s3 --proxy-faults 0.05 --s3-client obstore

Actors (each a process; ``--seed`` makes the random choices and the injected faults repeatable):

- ``--writers`` writers loop over appends, overwrite_partitions, delete_scope, delete_rows and
  build_indices, each tagged with its own ``txn`` and retried with the same txn after an
  error (also after ``CommitStateUnknownError``: the re-run is idempotent);
- a compactor runs ``kstore.compact`` in a loop, with its own txn (``--no-compact``: none);
- a GC collects in a loop with ``--gc-retention`` seconds (default 7 days; ``0`` works:
  ``enforce_retention_duration=False``) — a short-retention GC beside delete_rows and
  compaction is what used to raise ``CorruptMetadataError`` on intact data;
- ``--readers`` readers read the newest version and record what they saw.

``--kill-every S`` SIGKILLs a random writer, the compactor or the GC every S seconds (it is
restarted; an actor that dies by itself is restarted too and counted as a crash).

``--store s3`` runs moto (tests/s3_server.py) on 127.0.0.1; with ``--proxy-faults RATE`` the
actors reach it through the fault proxy (tests/fault_proxy.py): RATE/2 of the requests are
answered 500/503 without being forwarded, RATE/2 are forwarded and their answer dropped, and
every ``--hold-every`` seconds (about; default 20) one conditional PUT of a log entry is held
1-3 s while other conditional PUTs of that key get ``409 ConditionalRequestConflict``.
``--s3-client`` picks how the actors open the bucket: ``s3store`` (kstore's ``S3Store``, what
an ``s3://`` URL opens), ``obstore`` (``kstore.io.objstore.ObjectStore`` with obstore's own
options) or ``mixed`` (actors alternate). Both are the one obstore client since #30; the
final check reads moto directly.

At the end every version is replayed against a row model (the simulation's oracle,
``tests.simulation.sim.Op``) and every read is compared with the model's rows of the version
it read. Printed figures (exit status 1 when a must-be-0 figure is not 0):

- must be 0: acknowledged rows lost, rows duplicated, version numbers claimed twice, ops
  committed twice, failed ops that committed, reader anomalies (a read that differs from
  the version it read), retained versions that differ from the model, CorruptMetadataError
  seen by any actor on intact data (intact: the final check read every retained version),
  versions the final check found damaged, exceptions that are no KstoreError, actors that
  died by themselves (not by the soak's SIGKILL);
- allowed, counted: CommitStateUnknownError (the op is re-run with its txn; every op whose
  outcome was unknown, or whose writer was killed during it, is resolved from the log:
  committed once or not at all, never twice), CommitConflictError and other KstoreErrors per actor, store faults injected
  (the proxy's counters), SIGKILLs, reads of versions expired since.

The work directory (op logs per actor, each actor's stderr) is kept and printed.
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
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

UUID = "soak"
PARTS = [f"p{i}" for i in range(8)]
BUCKET = "soak"
#: moto's fake credentials (tests/s3_server.py); never real ones
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
#: writer kinds and their weights
KINDS = {"append": 60, "overwrite": 15, "delete_scope": 10, "delete_rows": 10, "build_indices": 5}
ATTEMPTS = 3


def _digest(rids) -> str:
    return hashlib.sha256(",".join(map(str, sorted(rids))).encode()).hexdigest()[:16]


def open_soak_store(spec: dict) -> Any:
    """The store an actor (or the final check) uses: ``spec`` = {"client", "path" | "endpoint"}."""
    client = spec["client"]
    if client == "local":
        from kstore.io.local import LocalStore

        return LocalStore(spec["path"])
    if client == "s3store":
        from kstore.io.s3 import S3Store

        return S3Store(BUCKET, "data", endpoint_url=spec["endpoint"], region_name="us-east-1", **CREDENTIALS)
    if client == "obstore":
        from kstore.io.objstore import ObjectStore

        return ObjectStore(f"s3://{BUCKET}/data", {"endpoint": spec["endpoint"], "allow_http": True,
                                                   "region": "us-east-1", "access_key_id": "testing",
                                                   "secret_access_key": "testing",
                                                   "user_agent": f"kstore-soak-{spec.get('actor', '?')}"})
    raise ValueError(f"unknown client {client!r}")


# -- actor processes ----------------------------------------------------------------------


class _Log:
    """One actor's JSON-lines log (flushed per line: a SIGKILL loses at most the line being written)."""

    def __init__(self, path: Path, actor: str) -> None:
        self.f = path.open("a")
        self.actor = actor

    def write(self, **record: Any) -> None:
        self.f.write(json.dumps({"actor": self.actor, "t": round(time.time(), 3), **record}) + "\n")
        self.f.flush()

    def error(self, exc: BaseException, **record: Any) -> None:
        from kstore.errors import CommitStateUnknownError, KstoreError

        extra = {}
        if isinstance(exc, CommitStateUnknownError):
            extra = {"committed": exc.committed, "version": exc.version}
        self.write(event="error", type=type(exc).__name__, kstore=isinstance(exc, KstoreError),
                   message=str(exc)[:600], **extra, **record)


def _run_op(log: _Log, op: dict, call) -> None:
    """Run one tagged op with retries (same txn) and log its outcome: ``acked`` (with the
    version returned), ``noop`` (nothing to do), ``unknown`` (a CommitStateUnknownError
    without ``committed``, or an exception that is no KstoreError, was the last word) or
    ``failed`` (every attempt raised an error that promises nothing was committed)."""
    from kstore.errors import CommitStateUnknownError, KstoreError

    log.write(event="op", **op, outcome="pending")  # a SIGKILL leaves it pending
    outcome, version, uncertain = "failed", None, False
    for attempt in range(ATTEMPTS):
        try:
            outcome, version = call()
            break
        except CommitStateUnknownError as exc:
            log.error(exc, tag=op["tag"], attempt=attempt)
            if exc.committed:
                outcome, version = "acked", exc.version
                break
            uncertain = True  # re-run with the same txn: it commits once, or finds it committed
        except KstoreError as exc:
            log.error(exc, tag=op["tag"], attempt=attempt)
        except Exception as exc:  # noqa: BLE001 - a leaked exception is a finding, not a crash
            log.error(exc, tag=op["tag"], attempt=attempt)
            uncertain = True
        time.sleep(random.uniform(0.05, 0.3) * (attempt + 1))
    else:
        outcome = "unknown" if uncertain else "failed"
    log.write(event="op", **op, outcome=outcome, version=version)


def writer(spec: dict, out: Path, stop: Path, actor: str, seed: int) -> None:
    import pandas as pd

    import kstore

    store = open_soak_store(dict(spec, actor=actor))
    rng = random.Random(seed)
    random.seed(seed)
    log = _Log(out, actor)
    seq = 0
    while not stop.exists():
        seq += 1
        tag = [f"{actor}-{seed}", seq]
        kind = rng.choices(list(KINDS), list(KINDS.values()))[0]
        rows = [[seed * 10_000_000 + seq * 10 + k, rng.choice(PARTS), rng.randrange(10)] for k in range(rng.randint(1, 4))]
        if kind == "overwrite":
            p = rng.choice(PARTS)
            rows = [[r, p, x] for r, _, x in rows]
        op = {"tag": tag, "kind": kind, "rows": rows if kind in ("append", "overwrite") else [],
              "partition": rng.choice(PARTS), "x": rng.randrange(10)}
        frame = pd.DataFrame({"p": [r[1] for r in rows], "rid": [r[0] for r in rows], "x": [r[2] for r in rows]})
        txn = (tag[0], tag[1])

        def call(kind=kind, frame=frame, op=op, txn=txn):
            if kind == "append":
                meta = kstore.update_dataset(store, UUID, frame, txn=txn)
            elif kind == "overwrite":
                meta = kstore.update_dataset(store, UUID, frame, mode="overwrite_partitions", txn=txn)
            elif kind == "delete_scope":
                meta = kstore.update_dataset(store, UUID, delete_scope=[{"p": op["partition"]}], txn=txn)
            elif kind == "delete_rows":
                meta = kstore.delete_rows(store, UUID, [[("x", "==", op["x"])]], txn=txn)
            else:
                meta = kstore.build_indices(store, UUID, ["x"], txn=txn)
            return "acked", meta.version

        _run_op(log, op, call)


def compactor(spec: dict, out: Path, stop: Path, actor: str, seed: int) -> None:
    import kstore

    store = open_soak_store(dict(spec, actor=actor))
    rng = random.Random(seed)
    random.seed(seed)
    log = _Log(out, actor)
    seq = 0
    while not stop.exists():
        seq += 1
        tag = [f"{actor}-{seed}", seq]
        op = {"tag": tag, "kind": "compact", "rows": [], "partition": None, "x": None}

        def call(tag=tag):
            plan = kstore.compact(store, UUID, min_files=2, txn=(tag[0], tag[1]), max_workers=2)
            return ("noop", plan.version) if plan.committed is None else ("acked", plan.committed)

        _run_op(log, op, call)
        time.sleep(rng.uniform(1, 3))


def gc_loop(spec: dict, out: Path, stop: Path, actor: str, seed: int, retention_s: float) -> None:
    from datetime import timedelta

    import kstore
    from kstore.errors import KstoreError

    store = open_soak_store(dict(spec, actor=actor))
    rng = random.Random(seed)
    log = _Log(out, actor)
    retention = timedelta(seconds=retention_s)
    while not stop.exists():
        try:
            r = kstore.garbage_collect(store, UUID, retention=retention, enforce_retention_duration=False)
            log.write(event="gc", deleted=len(r.deleted_files), expired=len(r.expired_versions), fence=r.fence_version)
        except KstoreError as exc:
            log.error(exc)
        except Exception as exc:  # noqa: BLE001 - a leaked exception is a finding
            log.error(exc)
        time.sleep(rng.uniform(0.5, 2))


def reader(spec: dict, out: Path, stop: Path, actor: str, seed: int) -> None:
    import kstore
    from kstore.blocks.read import read_plan
    from kstore.errors import KstoreError

    store = open_soak_store(dict(spec, actor=actor))
    log = _Log(out, actor)
    while not stop.exists():
        try:
            plan = kstore.plan_read(store, UUID)
            rids = read_plan(store, plan, ["rid"]).column("rid").to_pylist()
            log.write(event="read", version=plan.version, digest=_digest(rids), rows=len(rids),
                      dups=len(rids) - len(set(rids)))
        except KstoreError as exc:
            log.error(exc)
        except Exception as exc:  # noqa: BLE001 - a leaked exception is a finding
            log.error(exc)


ROLES = {"writer": writer, "compactor": compactor, "gc": gc_loop, "reader": reader}


# -- the final check ----------------------------------------------------------------------


def _lines(work: Path) -> list[dict]:
    out = []
    for f in sorted(work.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # the line a SIGKILL cut
    return out


def verify(store: Any, work: Path) -> dict:
    import kstore
    from kstore.blocks import load
    from kstore.errors import CorruptMetadataError, KstoreError
    from tests.simulation.sim import Op

    records = _lines(work)
    ops: dict[tuple, dict] = {}
    for r in records:
        if r.get("event") == "op":
            ops[tuple(r["tag"])] = r  # the last line of a tag is its outcome
    errors = [r for r in records if r.get("event") == "error"]

    damaged: list[str] = []
    versions = load.log_versions(store, UUID)
    entries = {}
    for v in versions:
        try:
            entries[v] = load.load_entry(store, UUID, v)
        except KstoreError as exc:
            damaged.append(f"log entry of version {v}: {type(exc).__name__}: {exc}"[:400])
    # a claim that proved void (its successor names another parent) is no version (FORMAT.md C)
    void = {v for v, e in entries.items() if (s := entries.get(v + 1)) is not None and s.parent == v
            and s.parent_commit_id and e.commit_id and s.parent_commit_id != e.commit_id}

    claimed_twice: list[str] = []
    parents: dict[str, int] = {}
    for v, e in sorted(entries.items()):
        if v in void:
            continue
        if e.parent is not None and e.parent != v - 1:
            claimed_twice.append(f"version {v} names parent {e.parent}")
        if e.parent_commit_id:
            if e.parent_commit_id in parents:
                claimed_twice.append(f"versions {parents[e.parent_commit_id]} and {v} name the same parent commit")
            parents[e.parent_commit_id] = v

    model = None
    model_digest: dict[int, str] = {}
    by_tag: dict[tuple, list[int]] = defaultdict(list)
    model_anomalies: list[str] = []
    lost_rids: set[int] = set()
    dup_rows = 0
    expired = checked = 0
    for v in versions:
        e = entries.get(v)
        if e is None or v in void:
            continue
        if e.deletes_dataset:
            model = None
            continue
        tag = tuple(e.txn) if e.txn else None
        if e.operation == "create":
            model = frozenset(tuple(r) for r in ops[tag]["rows"]) if tag in ops else None
            if tag in ops:
                by_tag[tag].append(v)
        elif tag is not None:
            o = ops.get(tag)
            if o is None:
                model_anomalies.append(f"version {v} ({e.operation}): unknown transaction {tag}")
                model = None
            else:
                by_tag[tag].append(v)
                model = Op(o["kind"], tag, rows=tuple(tuple(r) for r in o["rows"]), partition=o["partition"],
                           x=o["x"]).apply(model)
        elif e.operation != "vacuum":
            model_anomalies.append(f"version {v} ({e.operation}) has no txn")
        if model is not None:
            model_digest[v] = _digest(r[0] for r in model)
        if e.expired:
            expired += 1
            continue  # expired by GC: the model goes on, the data is gone
        try:
            table = kstore.read_table(store, UUID, version=v, columns=["rid", "p", "x"])
        except KstoreError as exc:
            damaged.append(f"retained version {v} ({e.operation}): {type(exc).__name__}: {exc}"[:400])
            continue
        checked += 1
        rids = table.column("rid").to_pylist()
        dup_rows += len(rids) - len(set(rids))
        got = frozenset(zip(rids, table.column("p").to_pylist(), table.column("x").to_pylist()))
        if model is not None and got != model:
            missing, extra = model - got, got - model
            lost_rids |= {r[0] for r in missing}
            model_anomalies.append(f"version {v} ({e.operation}, txn {tag}) differs from the model: missing "
                                   f"{len(missing)} {sorted(missing)[:3]}, extra {len(extra)} {sorted(extra)[:3]}")
        model = got
        model_digest[v] = _digest(rids)

    # acknowledged ops: present once in the log; a version they were told is theirs or later
    acked_missing = [t for t, o in ops.items() if o["outcome"] == "acked" and o["kind"] in ("append", "overwrite")
                     and not by_tag.get(t)]
    lost_rows = sum(len(ops[t]["rows"]) for t in acked_missing) + len(lost_rids)
    for t in acked_missing:
        v = ops[t].get("version")
        if v in entries and entries[v].txn and tuple(entries[v].txn) != t:
            claimed_twice.append(f"{t} was acknowledged as version {v}, which is {tuple(entries[v].txn)}'s")
    for t, o in ops.items():
        vs = by_tag.get(t)
        if o["outcome"] == "acked" and vs and o.get("version") is not None and o["version"] < vs[0]:
            claimed_twice.append(f"{t} was acknowledged as version {o['version']} but committed as {vs[0]}")
    for r in records:
        f = r.get("fence")
        if r.get("event") == "gc" and f is not None and f in entries and entries[f].operation != "vacuum":
            claimed_twice.append(f"GC fence version {f} is a {entries[f].operation} of {entries[f].txn}")
    committed_twice = {t: vs for t, vs in by_tag.items() if len(vs) > 1}
    failed_committed = {t: by_tag[t] for t, o in ops.items() if o["outcome"] == "failed" and by_tag.get(t)}

    # CommitStateUnknownError: resolved from the log
    unknown_tags = {tuple(r["tag"]) for r in errors if r["type"] == "CommitStateUnknownError" and "tag" in r}
    unknown_tags |= {t for t, o in ops.items() if o["outcome"] in ("unknown", "pending")}
    resolved = Counter({0: "not committed", 1: "committed once"}.get(len(by_tag.get(t, [])), "committed twice")
                       for t in unknown_tags)

    # reads against the model of the version they read
    reads = bad_reads = read_dups = no_model = 0
    bad_read_examples: list[str] = []
    for r in records:
        if r.get("event") != "read":
            continue
        reads += 1
        read_dups += r["dups"]
        want = model_digest.get(r["version"])
        if want is None:
            no_model += 1
            if r["version"] not in entries or r["version"] in void:
                bad_reads += 1
                bad_read_examples.append(f"{r['actor']} read version {r['version']}, which is no version of the log")
        elif want != r["digest"]:
            bad_reads += 1
            bad_read_examples.append(f"{r['actor']} read version {r['version']}: {r['rows']} rows, digest "
                                     f"{r['digest']} != the model's {want}")

    corrupt = [r for r in errors if r["type"] == CorruptMetadataError.__name__]
    foreign = [r for r in errors if not r["kstore"]]
    errors_by_actor: dict[str, Counter] = defaultdict(Counter)
    for r in errors:
        errors_by_actor[r["actor"].rstrip("0123456789") or r["actor"]][r["type"]] += 1
    outcomes = Counter(o["outcome"] for o in ops.values())
    kinds = Counter(o["kind"] for o in ops.values() if o["outcome"] == "acked")
    gc_runs = [r for r in records if r.get("event") == "gc"]
    figures = {
        "acknowledged rows lost": lost_rows,
        "rows duplicated": dup_rows + read_dups,
        "version numbers claimed twice": len(claimed_twice),
        "ops committed twice": len(committed_twice),
        "failed ops that committed": len(failed_committed),
        "reader anomalies": bad_reads,
        "retained versions differing from the model": len(model_anomalies),
        "CorruptMetadataError on intact data": len(corrupt) if not damaged else 0,
        "versions the final check found damaged": len(damaged),
        "exceptions that are no KstoreError": len(foreign),
    }
    return {
        "must_be_zero": figures,
        "allowed": {
            "CommitStateUnknownError": sum(1 for r in errors if r["type"] == "CommitStateUnknownError"),
            "unknown outcomes resolved from the log (CommitStateUnknownError or SIGKILL mid-op)": dict(resolved),
            "CommitConflictError": sum(1 for r in errors if r["type"] == "CommitConflictError"),
            "errors by actor and type": {a: dict(c) for a, c in sorted(errors_by_actor.items())},
        },
        "details": {
            "claimed_twice": claimed_twice[:10], "committed_twice": [f"{t}: {vs}" for t, vs in
                                                                     list(committed_twice.items())[:10]],
            "failed_but_committed": [f"{t}: {vs}" for t, vs in list(failed_committed.items())[:10]],
            "model_anomalies": model_anomalies[:10], "reader_anomalies": bad_read_examples[:10],
            "damaged": damaged[:10],
            "CorruptMetadataError": [f"{r['actor']}: {r['message']}" for r in corrupt[:10]],
            "not_kstore_errors": [f"{r['actor']}: {r['type']}: {r['message']}" for r in foreign[:10]],
        },
        "run": {
            "versions": len(versions), "versions_expired": expired, "versions_checked": checked,
            "void_claims": len(void), "ops": dict(outcomes), "acked_by_kind": dict(kinds), "reads": reads,
            "reads_of_versions_not_in_the_model": no_model, "gc_runs": len(gc_runs),
            "gc_files_deleted": sum(r["deleted"] for r in gc_runs),
        },
    }


# -- the driver ---------------------------------------------------------------------------


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text()[-n:]
    except OSError:
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", choices=["local", "s3"], default="local")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--no-compact", action="store_true", help="run no compactor")
    ap.add_argument("--kill-every", type=float, default=0,
                    help="SIGKILL a random writer, the compactor or the GC every S seconds")
    ap.add_argument("--gc-retention", type=float, default=7 * 86400,
                    help="GC retention in seconds (default 7 days; 0 works)")
    ap.add_argument("--proxy-faults", type=float, default=0.0,
                    help="s3: put the fault proxy in front of moto; RATE/2 failed (500/503), RATE/2 dropped, "
                         "plus held conditional PUTs of log entries")
    ap.add_argument("--hold-every", type=float, default=20.0,
                    help="with --proxy-faults: hold one conditional PUT of a log entry (1-3 s) about every S s "
                         "(0: never)")
    ap.add_argument("--s3-client", choices=["s3store", "obstore", "mixed"], default="s3store",
                    help="how the actors open the bucket: S3Store, ObjectStore, or alternating")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", help="where the op logs go (default: a new temporary directory)")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--role-args", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role:
        r = json.loads(a.role_args)
        ROLES[a.role](r["spec"], Path(r["out"]), Path(r["stop"]), r["actor"], r["seed"], *r.get("extra", []))
        return 0
    if a.proxy_faults and a.store != "s3":
        ap.error("--proxy-faults needs --store s3")

    import pandas as pd

    import kstore

    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="kstore-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(a.seed)
    server = proxy = None
    try:
        if a.store == "s3":
            import boto3

            from tests.s3_server import S3Server

            server = S3Server()
            upstream = server.start()
            boto3.client("s3", endpoint_url=upstream, region_name="us-east-1").create_bucket(Bucket=BUCKET)
            endpoint = upstream
            if a.proxy_faults:
                from tests.fault_proxy import FaultProxy

                proxy = FaultProxy(upstream, seed=a.seed)
                endpoint = proxy.start()
            clients = {"s3store": ["s3store"], "obstore": ["obstore"], "mixed": ["s3store", "obstore"]}[a.s3_client]
            specs = [{"client": c, "endpoint": endpoint} for c in clients]
            check_spec = {"client": "s3store", "endpoint": upstream}  # the final check reads moto directly
        else:
            specs = [{"client": "local", "path": str(work / "store")}]
            check_spec = specs[0]
        check_store = open_soak_store(check_spec)
        init = pd.DataFrame({"p": PARTS, "rid": range(len(PARTS)), "x": range(len(PARTS))})
        kstore.store_dataset(check_store, UUID, init, partition_on="p", secondary_indices="x", txn=("init", 1))
        with (work / "init.jsonl").open("w") as f:
            f.write(json.dumps({"actor": "init", "event": "op", "tag": ["init", 1], "kind": "create",
                                "rows": init[["rid", "p", "x"]].values.tolist(), "partition": None, "x": None,
                                "outcome": "acked", "version": 0}) + "\n")
        if proxy is not None:
            proxy.set_faults(fail_rate=a.proxy_faults / 2, drop_rate=a.proxy_faults / 2, seed=a.seed)

        stop = work / "STOP"
        procs: dict[str, subprocess.Popen] = {}
        incarnations: Counter = Counter()
        stderr_files: dict[str, Path] = {}
        actors: dict[str, tuple[str, list]] = {}  # actor -> (role, extra args)
        for w in range(a.writers):
            actors[f"w{w}"] = ("writer", [])
        if not a.no_compact:
            actors["compact"] = ("compactor", [])
        actors["gc"] = ("gc", [a.gc_retention])
        for r in range(a.readers):
            actors[f"r{r}"] = ("reader", [])

        def start(actor: str) -> None:
            role, extra = actors[actor]
            n = incarnations[actor]
            incarnations[actor] += 1
            index = list(actors).index(actor)
            args = {"spec": specs[(index + n) % len(specs)], "out": str(work / f"{actor}-{n}.jsonl"), "stop": str(stop),
                    "actor": actor, "seed": a.seed * 100_000 + index * 1000 + n, "extra": extra}
            stderr_files[actor] = work / f"{actor}.stderr"
            with stderr_files[actor].open("a") as err:
                procs[actor] = subprocess.Popen([sys.executable, __file__, "--role", role,
                                                 "--role-args", json.dumps(args)], cwd=ROOT, stderr=err)

        for actor in actors:
            start(actor)
        ready = time.time() + 120  # the clock starts once every actor works (imports are slow on a busy box)
        while time.time() < ready and not all((work / f"{x}-0.jsonl").exists()
                                              and (work / f"{x}-0.jsonl").stat().st_size for x in actors):
            time.sleep(0.2)
        victims = [x for x in actors if actors[x][0] != "reader"]
        kills: Counter = Counter()
        crashes: list[str] = []
        t0 = time.time()
        t_end = t0 + a.minutes * 60
        next_kill = t0 + a.kill_every if a.kill_every else float("inf")
        next_hold = t0 + rng.uniform(0.5, 1.5) * a.hold_every if proxy is not None and a.hold_every else float("inf")
        while time.time() < t_end:
            time.sleep(0.5)
            now = time.time()
            for actor, p in list(procs.items()):
                if p.poll() is not None:
                    crashes.append(f"{actor} exited with {p.returncode} after {now - t0:.0f} s: "
                                   f"{_tail(stderr_files[actor], 600)}")
                    start(actor)
            if now >= next_kill:
                victim = rng.choice(victims)
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                kills[victim.rstrip("0123456789")] += 1
                start(victim)
                next_kill = now + a.kill_every
            if now >= next_hold:
                proxy.hold_conditional_puts(hold_seconds=rng.uniform(1, 3), count=1)
                proxy.events.clear()  # only the counters are reported; keep memory flat
                next_hold = now + rng.uniform(0.75, 1.25) * a.hold_every
        stop.touch()
        for actor, p in procs.items():
            try:
                p.wait(300)
            except subprocess.TimeoutExpired:
                crashes.append(f"{actor} did not stop within 300 s after the end (killed)")
                p.kill()
                p.wait()
        faults = None
        if proxy is not None:
            proxy.set_faults(0, 0)
            proxy.hold_conditional_puts(count=0)
            proxy.release_held()
            proxy.wait_idle(30)
            faults = proxy.counters()
        report = verify(check_store, work)
    finally:
        if proxy is not None:
            proxy.stop()
        if server is not None:
            server.stop()
    report["must_be_zero"]["actor crashes (exits not by SIGKILL)"] = len(crashes)
    report["details"]["crashes"] = crashes[:10]
    report["allowed"]["SIGKILLs"] = dict(kills)
    report["allowed"]["store faults injected"] = (
        None if faults is None else {k: faults[k] for k in ("requests", "failed", "dropped", "held", "conflicts",
                                                            "conflicts_same_body", "reads_missed_held")})
    report["run"].update(store=a.store, s3_client=a.s3_client if a.store == "s3" else None,
                         proxy_faults=a.proxy_faults, minutes=a.minutes, writers=a.writers, readers=a.readers,
                         compactor=not a.no_compact, gc_retention_s=a.gc_retention, seed=a.seed, workdir=str(work))
    print(json.dumps(report, indent=1, default=str))
    bad = {k: v for k, v in report["must_be_zero"].items() if v}
    print("VIOLATIONS: " + ", ".join(f"{k} = {v}" for k, v in bad.items()) if bad else "OK: every must-be-0 figure is 0")
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
