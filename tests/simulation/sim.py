"""Deterministic simulation of kstore's commit/GC protocol under concurrency and faults.

One *schedule* = one seed. Actors (writers, a garbage collector, readers) run the real
kstore API in threads, but only one runs at a time: every store call is a yield point at
which a seeded scheduler picks the actor that goes next and decides the call's fate (done,
failed before or after its effect, the actor killed before or after it, or slow). A
simulated clock (``kstore.core.runtime``) advances between calls, sometimes by hours or
days, so retention windows and log-entry ages are crossed within one schedule. The same
seed replays the same interleaving exactly.

After every step an observer looks at the store itself (not through the faulty wrapper)
and checks the invariants:

- no version number is claimed twice (an entry's ``commit_id`` never changes);
- every version reads, the moment it is claimed, exactly as its parent plus its operation
  (the oracle: a row model applied in version order), so no acknowledged row is ever lost
  unless a later acknowledged operation removed it;
- nothing a retained version references is deleted; the main file shows a committed
  version, byte-for-byte the same metadata as its log entry;
- an operation that returned was committed exactly once; one that raised a non-"unknown"
  error was not committed at all; ``CommitStateUnknownError(committed=True)`` was;
- every read returns exactly the snapshot of the version it read;
- after the actors finish, a final garbage collection leaves no orphan older than its
  retention.

A violation raises :class:`Violation` with the seed and the full schedule (the trace).
"""

from __future__ import annotations

import io
import random
import threading
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pyarrow as pa

import kstore
from kstore.blocks import load
from kstore.blocks.commit import BASE_MAX_AGE
from kstore.blocks.frame import planned_rows, read_frame
from kstore.blocks.read import read_plan
from kstore.core import naming, runtime, serialize
from kstore.core.log import LOG_MIN_AGE
from kstore.eager import _plan_and_read
from kstore.errors import (
    CommitStateUnknownError,
    DatasetNotFoundError,
    KstoreError,
    StoreError,
    VersionNotFoundError,
)

UUID = "sim"
EPOCH = 1_800_000_000.0
PARTITIONS = ("p0", "p1", "p2")
#: the protocol assumes one store call completes within this (simulated) time
MAX_CALL_TIME = (LOG_MIN_AGE - BASE_MAX_AGE) / 3


class Killed(BaseException):
    """The actor's process died (no ``except Exception`` handler runs)."""


class Violation(AssertionError):
    """An invariant broke; the message names the seed and carries the schedule."""


@dataclass
class Config:
    writers: int = 3
    ops_per_writer: int = 3
    gc_runs: int = 2
    reads: int = 3
    compactions: int = 2  # kstore.compact runs by a compactor actor beside the writers
    fault_rate: float = 0.04
    kill_rate: float = 0.01
    create_concurrently: bool = False  # no dataset at the start: writers race to create it
    delete_rate: float = 0.0  # chance that a GC run is a delete_dataset instead
    jump_rate: float = 0.02  # chance per step that hours pass (an actor descheduled)
    retentions: tuple[timedelta, ...] = (timedelta(days=7), timedelta(seconds=2), timedelta(0))
    max_steps: int = 20_000
    #: chance that an operation opens a snapshot first and commits as its typed operation
    #: (built on that version: other actors may commit between the open and the commit)
    snapshot_rate: float = 0.3


@dataclass
class Stats:
    steps: int = 0
    faults: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    versions: int = 0
    reads_checked: int = 0
    committed: Counter = field(default_factory=Counter)  # versions by operation kind


# ---------------------------------------------------------------------------------------
# runtime and scheduler
# ---------------------------------------------------------------------------------------


class SimRuntime(runtime.FixedRuntime):
    """The simulated clock (starts at :data:`EPOCH`), seeded entropy, one thread per pool."""

    def __init__(self, seed: int) -> None:
        super().__init__(EPOCH, seed ^ 0x5EED)


class Scheduler:
    """Runs one actor at a time; every store call (and an actor's start) is a yield point."""

    def __init__(self, seed: int, config: Config, clock: SimRuntime, stats: Stats) -> None:
        self.rng = random.Random(seed)
        self.config, self.clock, self.stats = config, clock, stats
        self.cv = threading.Condition()
        self.waiting: dict[str, tuple[str, str, float]] = {}  # actor -> (method, key, since)
        self.running: str | None = None
        self.grant: tuple[str, str] | None = None  # (actor, fate)
        self.dead: set[str] = set()
        self.trace: list[str] = []
        self.alive: set[str] = set()

    # called from actor threads
    def yield_point(self, actor: str, method: str, key: str) -> str:
        with self.cv:
            self.waiting[actor] = (method, key, self.clock.time())
            if self.running == actor:
                self.running = None
            self.cv.notify_all()
            while not (self.grant is not None and self.grant[0] == actor):
                self.cv.wait()
            fate = self.grant[1]
            self.grant = None
            del self.waiting[actor]
            self.running = actor
            return fate

    def finished(self, actor: str) -> None:
        with self.cv:
            self.alive.discard(actor)
            if self.running == actor:
                self.running = None
            self.cv.notify_all()

    # main thread
    def wait_quiet(self) -> None:
        with self.cv:
            while self.running is not None or self.grant is not None or \
                    len(self.waiting) < len(self.alive):
                self.cv.wait(5)

    def step(self) -> bool:
        """Let one actor make its next call; False when every actor has finished."""
        self.wait_quiet()
        with self.cv:
            if not self.waiting:
                return False
            names = sorted(self.waiting)
            forced = [a for a in names if self._claim_overdue(a)]
            actor = forced[0] if forced else self.rng.choice(names)
            method, key, _ = self.waiting[actor]
            fate = self._fate(method, key)
            self._advance_clock(forced_claims=bool(forced))
            self.stats.steps += 1
            self.trace.append(f"{self.stats.steps} t={self.clock.time() - EPOCH:.1f} {actor} {method} {key} {fate}")
            self.grant = (actor, fate)
            self.running = actor
            self.cv.notify_all()
        return True

    def _claim_overdue(self, actor: str) -> bool:
        method, key, since = self.waiting[actor]
        return (method == "put_if_absent" and "/_kstore/log/" in key
                and self.clock.time() - since > MAX_CALL_TIME.total_seconds() / 2)

    def _fate(self, method: str, key: str) -> str:
        if method == "start":
            return "ok"
        r = self.rng.random()
        c = self.config
        if r < c.kill_rate:
            fate = self.rng.choice(["kill-before", "kill-after"])
        elif r < c.kill_rate + c.fault_rate:
            fate = self.rng.choice(["error-before", "error-after", "slow"])
        else:
            return "ok"
        self.stats.faults[fate] += 1
        return fate

    def _advance_clock(self, forced_claims: bool) -> None:
        r = self.rng.random()
        jump = self.config.jump_rate
        if r < jump and not forced_claims and not self._claims_pending():
            self.clock.advance(self.rng.uniform(600, 3 * 3600))  # an actor descheduled for a while
        elif r < jump * 1.25 and not forced_claims and not self._claims_pending():
            self.clock.advance(self.rng.uniform(1, 9) * 86400)  # days pass: retention windows close
        else:
            self.clock.advance(self.rng.uniform(0, 2))

    def _claims_pending(self) -> bool:
        return any(m == "put_if_absent" and "/_kstore/log/" in k for m, k, _ in self.waiting.values())


class SimStore:
    """One actor's view of the shared store: every call yields to the scheduler."""

    def __init__(self, inner: Any, sched: Scheduler, actor: str, observer: Observer) -> None:
        self.inner, self.sched, self.actor, self.observer = inner, sched, actor, observer
        self.url = None
        self.atomic_create = True

    def __repr__(self) -> str:
        return f"SimStore({self.actor})"

    def _call(self, method: str, key: str, fn: Callable[[], Any], mutates: bool) -> Any:
        if self.actor in self.sched.dead:
            raise Killed(self.actor)
        fate = self.sched.yield_point(self.actor, method, key)
        if fate == "kill-before":
            self.sched.dead.add(self.actor)
            raise Killed(self.actor)
        if fate == "error-before":
            raise StoreError(f"injected failure before {method} {key}")
        if fate == "slow":
            self.sched.clock.advance(self.sched.rng.uniform(1, MAX_CALL_TIME.total_seconds() / 4))
        result = fn()
        if mutates:
            self.observer.mutated(method, key)
        if fate == "kill-after":
            self.sched.dead.add(self.actor)
            raise Killed(self.actor)
        if fate == "error-after":
            raise StoreError(f"injected failure after {method} {key}")
        return result

    def get(self, key: str) -> bytes:
        return self._call("get", key, lambda: self.inner.get(key), False)

    def put(self, key: str, data: bytes) -> None:
        return self._call("put", key, lambda: self.inner.put(key, data), True)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, data), True)

    def delete(self, key: str) -> None:
        return self._call("delete", key, lambda: self.inner.delete(key), True)

    def exists(self, key: str) -> bool:
        return self._call("exists", key, lambda: self.inner.exists(key), False)

    def iter_prefix(self, prefix: str, start_after: str | None = None):
        return iter(self._call("iter_prefix", prefix, lambda: sorted(self.inner.iter_prefix(prefix, start_after)),
                               False))

    def open(self, key: str):
        data = self._call("open", key, lambda: self.inner.get(key), False)
        return io.BytesIO(data)


# ---------------------------------------------------------------------------------------
# the row model (oracle)
# ---------------------------------------------------------------------------------------

Rows = frozenset  # of (rid, p, x)


@dataclass(frozen=True)
class Op:
    kind: str  # create | append | overwrite | delete_scope | delete_rows | build_indices | compact
    tag: tuple[str, int]
    rows: tuple[tuple[int, str, int], ...] = ()
    partition: str | None = None
    x: int | None = None
    snapshot: bool = False  # run as a typed operation of a snapshot opened first

    def apply(self, before: Rows | None) -> Rows:
        base = before or frozenset()
        if self.kind == "create":
            return frozenset(self.rows)
        if self.kind == "append":
            return base | frozenset(self.rows)
        if self.kind == "overwrite":
            touched = {p for _, p, _ in self.rows}
            return frozenset(r for r in base if r[1] not in touched) | frozenset(self.rows)
        if self.kind == "delete_scope":
            return frozenset(r for r in base if r[1] != self.partition)
        if self.kind == "delete_rows":
            return frozenset(r for r in base if r[2] != self.x)
        return base


def frame(rows) -> pd.DataFrame:
    return pd.DataFrame({"p": [r[1] for r in rows], "rid": [r[0] for r in rows], "x": [r[2] for r in rows]})


def rows_of(table: pa.Table) -> Rows:
    d = table.to_pydict()
    return frozenset(zip(d["rid"], d["p"], d["x"]))


# ---------------------------------------------------------------------------------------
# observer: checks the store itself after every step
# ---------------------------------------------------------------------------------------


class Observer:
    def __init__(self, raw: Any, seed: int, sched: Scheduler) -> None:
        self.raw, self.seed, self.sched = raw, seed, sched
        self.rng = random.Random(seed ^ 0x0B5E)
        self.commit_ids: dict[int, str | None] = {}
        self.snapshots: dict[int, Rows | None] = {}  # None: a version without a dataset
        self.tags: dict[int, tuple[str, int] | None] = {}
        self.meta_dicts: dict[int, dict] = {}
        self.refs: dict[int, frozenset[str]] = {}
        self.retained: set[int] = set()
        self.ops: dict[tuple[str, int], Op] = {}
        self.dirty_log = True
        self.deleted: list[str] = []
        self.main_dirty = True
        self.lock = threading.Lock()

    def fail(self, what: str) -> None:
        raise Violation(f"seed {self.seed}: {what}\n--- schedule ---\n" + "\n".join(self.sched.trace[-400:]))

    def mutated(self, method: str, key: str) -> None:
        with self.lock:
            if "/_kstore/log/" in key:
                self.dirty_log = True
            elif naming.METADATA_MARKER in key:
                self.main_dirty = True
            if method == "delete":
                self.deleted.append(key)

    def check(self) -> None:
        with self.lock:
            dirty, self.dirty_log = self.dirty_log, False
            deleted, self.deleted = self.deleted, []
            main_dirty, self.main_dirty = self.main_dirty, False
        if dirty:
            self._scan_log()
        for key in deleted:
            users = [v for v in self.retained if key in self.refs.get(v, ())]
            if users:
                self.fail(f"{key} was deleted, but retained version(s) {sorted(users)} reference it")
        if main_dirty:
            self._check_main()

    def _scan_log(self) -> None:
        present = set()
        deletes = [-1]
        for key in sorted(self.raw.iter_prefix(naming.log_prefix(UUID))):
            v = naming.version_from_log_key(UUID, key)
            if v is None:
                continue
            present.add(v)
            raw_entry = serialize.loads(self.raw.get(key), "json")
            if raw_entry.get("operation") == "delete" and not raw_entry.get("expired"):
                deletes.append(v)
            cid = raw_entry.get("commit_id")
            if v in self.commit_ids and self.commit_ids[v] != cid:
                self.fail(f"version {v} was claimed twice (commit ids {self.commit_ids[v]} and {cid})")
            if raw_entry.get("expired"):
                self.retained.discard(v)
                if v not in self.commit_ids:
                    self.fail(f"version {v} appeared as a tombstone without having been committed")
                continue
            if v in self.commit_ids:
                continue
            self.commit_ids[v] = cid
            self._new_version(v, raw_entry)
        for v in list(self.retained):
            if v not in present:
                self.retained.discard(v)
        self._check_history(max(deletes))

    def _check_history(self, deleted_at: int) -> None:
        """history() (from summaries, markers and entries) shows exactly the live versions
        since the last deletion; it may leave out a version GC marked expired and then died."""
        live = {v for v in self.retained if v > deleted_at}
        try:
            shown = {h.version: h for h in kstore.history(self.raw, UUID)}
        except DatasetNotFoundError:
            shown = {}
        except KstoreError as exc:
            self.fail(f"history() failed on a quiet store: {exc!r}")
        if set(shown) - live:
            self.fail(f"history() shows versions {sorted(set(shown) - live)} that are expired or were never committed")
        marked = set(load.list_log(self.raw, UUID).expired)
        if (live - marked) - set(shown):
            self.fail(f"history() leaves out live versions {sorted((live - marked) - set(shown))}")
        for v, h in shown.items():
            if h.txn != self.tags.get(v):
                self.fail(f"history() shows version {v} with txn {h.txn}, its entry says {self.tags.get(v)}")

    def _new_version(self, v: int, entry: dict) -> None:
        parent = entry.get("parent")
        if parent != (v - 1 if v > 0 else None):
            self.fail(f"version {v} names parent {parent}")
        txn = tuple(entry["txn"]) if entry.get("txn") else None
        self.tags[v] = txn
        operation = entry.get("operation")
        self.sched.stats.committed[operation] += 1
        if v > 0 and v - 1 not in self.snapshots:
            self.fail(f"version {v} appeared but version {v - 1} was never seen")
        before = self.snapshots.get(v - 1) if v > 0 else None
        if entry.get("metadata") is None and entry.get("actions") is None:
            if operation not in ("vacuum", "delete"):
                self.fail(f"version {v} ({operation}) has no metadata")
            self.snapshots[v] = None
            return
        if operation == "vacuum":
            expected = before
            if before is None:
                self.fail(f"version {v} is a vacuum of a dataset that does not exist, with metadata")
        else:
            op = self.ops.get(txn) if txn else None
            if op is None:
                self.fail(f"version {v} ({operation}) carries an unknown transaction {txn}")
            expected = op.apply(before)
        try:
            table = kstore.read_table(self.raw, UUID, version=v)
        except KstoreError as exc:
            self.fail(f"version {v} does not read the moment it is committed: {exc!r}")
        got = rows_of(table)
        if got != expected:
            missing, extra = sorted((expected or frozenset()) - got)[:5], sorted(got - (expected or frozenset()))[:5]
            self.fail(f"version {v} ({operation}, {txn}) holds the wrong rows: missing {missing}, extra {extra}")
        self._check_indices(v, table)
        self.snapshots[v] = got
        meta = load.entry_metadata(self.raw, UUID, load.load_entry(self.raw, UUID, v))
        self.meta_dicts[v] = entry["metadata"] if entry.get("metadata") is not None else meta.to_dict()
        self.refs[v] = frozenset(meta.referenced_keys())
        self.retained.add(v)

    def _check_indices(self, v: int, table: pa.Table) -> None:
        """The index of x answers like a scan of the same version (one value per version)."""
        pairs = list(zip(table.column("rid").to_pylist(), table.column("x").to_pylist()))
        x = self.rng.randrange(6)
        hits = kstore.read_table(self.raw, UUID, version=v, predicates=[[("x", "==", x)]], columns=["rid"])
        if sorted(hits.column("rid").to_pylist()) != sorted(r for r, xx in pairs if xx == x):
            self.fail(f"version {v}: the index on x answers x == {x} differently from a scan")

    def _check_main(self) -> None:
        try:
            meta, _ = load.load_main(self.raw, UUID)
        except KstoreError as exc:
            self.fail(f"the main file does not parse: {exc!r}")
        if meta is None:
            return
        v = meta.version
        if v not in self.meta_dicts:
            self.fail(f"the main file shows version {v}, which was never committed with a dataset")
        if meta.to_dict() != self.meta_dicts[v]:
            self.fail(f"the main file's version {v} differs from its log entry")

    def check_read(self, version: int, rows: Rows, predicate: Any) -> None:
        snap = self.snapshots.get(version)
        if snap is None:
            self.fail(f"a reader read version {version}, which the observer never saw with a dataset")
        want = snap if predicate is None else frozenset(r for r in snap if _matches(r, predicate))
        if rows != want:
            self.fail(f"a read of version {version} {predicate} returned {len(rows)} rows, expected {len(want)}: "
                      f"missing {sorted(want - rows)[:5]}, extra {sorted(rows - want)[:5]}")


def _matches(row, predicate) -> bool:
    col, _, value = predicate
    return (row[2] if col == "x" else row[1]) == value


# ---------------------------------------------------------------------------------------
# actors
# ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    op: Op
    result: str  # acked | failed | unknown | killed
    version: int | None = None
    error: str = ""


class Simulation:
    def __init__(self, seed: int, make_store: Callable[[], Any], config: Config | None = None) -> None:
        self.seed = seed
        self.config = config or Config()
        self.raw = make_store()
        self.clock = SimRuntime(seed)
        self.stats = Stats()
        self.sched = Scheduler(seed, self.config, self.clock, self.stats)
        self.observer = Observer(self.raw, seed, self.sched)
        self.rng = random.Random(seed * 7 + 1)
        # its own stream: the operations each seed plans stay what they were before
        self.snap_rng = random.Random(seed * 13 + 7)
        self.outcomes: list[Outcome] = []
        self.errors: list[str] = []
        self.gc_retentions: list[timedelta] = []
        self.next_rid = 0

    # -- op generation (all decided up front, from the seed) ------------------------------

    def _rows(self, n: int, partitions=PARTITIONS) -> tuple[tuple[int, str, int], ...]:
        out = []
        for _ in range(n):
            self.next_rid += 1
            out.append((self.next_rid, self.rng.choice(partitions), self.rng.randrange(6)))
        return tuple(out)

    def _plan_writer(self, w: int) -> list[tuple[Op, int]]:
        ops = []
        for j in range(self.config.ops_per_writer):
            tag = (f"w{w}", j + 1)
            if j == 0 and self.config.create_concurrently:
                op = Op("create", tag, rows=self._rows(2))
            else:
                kind = self.rng.choice(["append", "append", "append", "overwrite", "delete_scope",
                                        "delete_rows", "build_indices"])
                if kind == "overwrite":
                    op = Op(kind, tag, rows=self._rows(self.rng.randint(1, 2), (self.rng.choice(PARTITIONS),)))
                elif kind == "delete_scope":
                    op = Op(kind, tag, partition=self.rng.choice(PARTITIONS))
                elif kind == "delete_rows":
                    op = Op(kind, tag, x=self.rng.randrange(6))
                elif kind == "build_indices":
                    op = Op(kind, tag)
                else:
                    op = Op(kind, tag, rows=self._rows(self.rng.randint(1, 3)))
            if op.kind != "create" and self.snap_rng.random() < self.config.snapshot_rate:
                op = replace(op, snapshot=True)
            retries = self.rng.choice([0, 0, 1, 2])  # txn retries after a failure
            ops.append((op, retries))
            self.observer.ops[tag] = op
        return ops

    def _plan_compactor(self) -> list[tuple[Op, int]]:
        """The compactor's operations (its own random stream: the writers' plans stay as
        they were before compaction joined the simulation)."""
        rng = random.Random(self.seed * 11 + 5)
        ops = []
        for j in range(self.config.compactions):
            op = Op("compact", ("c", j + 1), snapshot=self.snap_rng.random() < self.config.snapshot_rate)
            ops.append((op, rng.choice([0, 0, 1])))
            self.observer.ops[op.tag] = op
        return ops

    def _run_op(self, st: SimStore, op: Op) -> Any:
        if op.snapshot:
            return self._run_on_snapshot(st, op)
        if op.kind == "create":
            return kstore.store_dataset(st, UUID, frame(op.rows), partition_on="p", secondary_indices="x", txn=op.tag)
        if op.kind == "append":
            return kstore.update_dataset(st, UUID, frame(op.rows), txn=op.tag)
        if op.kind == "overwrite":
            return kstore.update_dataset(st, UUID, frame(op.rows), mode="overwrite_partitions", txn=op.tag)
        if op.kind == "delete_scope":
            return kstore.update_dataset(st, UUID, delete_scope=[{"p": op.partition}], txn=op.tag)
        if op.kind == "delete_rows":
            return kstore.delete_rows(st, UUID, [[("x", "==", op.x)]], txn=op.tag)
        if op.kind == "compact":
            done = kstore.compact(st, UUID, txn=op.tag)  # no store call after it returns
            return SimpleNamespace(version=done.version if done.committed is None else done.committed)
        return kstore.build_indices(st, UUID, ["x"], txn=op.tag)

    @staticmethod
    def _run_on_snapshot(st: SimStore, op: Op) -> Any:
        """The typed operation of a snapshot opened first: every store call of the open and
        of the operation is a yield point, so other actors commit in between."""
        snap = kstore.open_dataset(st, UUID)
        opts = kstore.CommitOptions(txn=op.tag)
        if op.kind == "append":
            return snap.append(frame(op.rows), options=opts)
        if op.kind == "overwrite":
            return snap.overwrite_partitions(frame(op.rows), options=opts)
        if op.kind == "delete_scope":
            return snap.delete_partitions([{"p": op.partition}], options=opts)
        if op.kind == "delete_rows":
            return snap.delete_rows([[("x", "==", op.x)]], options=opts)
        if op.kind == "compact":
            return snap.compact(options=opts)
        assert op.kind == "build_indices", op
        return snap.build_indices(["x"], options=opts)

    def _writer(self, name: str, plan: list[tuple[Op, int]]) -> None:
        st = SimStore(self.raw, self.sched, name, self.observer)
        for op, retries in plan:
            outcome = None
            for _ in range(retries + 1):
                outcome = self._attempt(st, op)
                if outcome.result in ("acked", "killed", "unknown"):
                    break
            self.outcomes.append(outcome)
            if outcome.result == "killed":
                return

    def _attempt(self, st: SimStore, op: Op) -> Outcome:
        try:
            meta = self._run_op(st, op)
        except Killed:
            return Outcome(op, "killed")
        except CommitStateUnknownError as exc:
            return Outcome(op, "acked" if exc.committed else "unknown", exc.version, repr(exc))
        except KstoreError as exc:
            # it raised: it must not have committed (the observer scans the store right now,
            # while this actor is the only one running)
            self.observer.check()
            committed = [v for v, t in self.observer.tags.items() if t == op.tag]
            if committed:
                self.errors.append(f"{st.actor} {op.kind} {op.tag} raised {type(exc).__name__}: {exc} "
                                   f"after it was committed as version {committed[0]}")
            return Outcome(op, "failed", None, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # invariant 4: every error is a KstoreError
            self.errors.append(f"{st.actor} {op.kind}: raw {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            return Outcome(op, "failed", None, repr(exc))
        # a txn already committed returns that state: the op's version is the one with its tag
        return Outcome(op, "acked", meta.version)

    def _gc(self, name: str) -> None:
        st = SimStore(self.raw, self.sched, name, self.observer)
        for _ in range(self.config.gc_runs):
            retention = self.rng.choice(self.config.retentions)
            self.gc_retentions.append(retention)
            delete = self.rng.random() < self.config.delete_rate
            try:
                if delete:
                    kstore.delete_dataset(st, UUID)
                else:
                    kstore.garbage_collect(st, UUID, retention=retention, enforce_retention_duration=False)
            except Killed:
                return
            except KstoreError:
                continue
            except Exception as exc:
                self.errors.append(f"{name} gc: raw {type(exc).__name__}: {exc}\n{traceback.format_exc()}")

    def _reader(self, name: str) -> None:
        st = SimStore(self.raw, self.sched, name, self.observer)
        for _ in range(self.config.reads):
            predicate = self.rng.choice([None, ("x", "==", self.rng.randrange(6)), ("p", "==", "p1")])
            version = None
            if self.rng.random() < 0.3:
                known = sorted(v for v, s in self.observer.snapshots.items() if s is not None)
                version = self.rng.choice(known) if known else None
            newest_at_start = max(self.observer.snapshots, default=None)
            # half the reads through the Arrow table, half into pandas (the bounded-memory
            # path when no row is filtered: one scan or file by file into numpy columns)
            as_frame = self.rng.random() < 0.5

            def read(plan: Any, meta: Any, st: Any = st, as_frame: bool = as_frame) -> tuple[Any, Rows]:
                if as_frame:
                    df = read_frame(st, plan, None, planned_rows(meta, plan))
                    return plan, frozenset(zip(df["rid"].tolist(), df["p"].tolist(), df["x"].tolist()))
                return plan, rows_of(read_plan(st, plan))

            try:
                plan, rows = _plan_and_read(st, UUID, [[predicate]] if predicate else None, None, version, None, None,
                                            read)
            except Killed:
                return
            except StoreError:
                continue  # an injected fault
            except (VersionNotFoundError, DatasetNotFoundError) as exc:
                self.observer.check()
                self._check_read_error(version, exc, newest_at_start)
                continue
            except Exception as exc:  # a read of a committed version must not fail otherwise
                self.errors.append(f"{name} read of version {version}: {type(exc).__name__}: {exc}\n"
                                   f"{traceback.format_exc()}")
                continue
            self.observer.check_read(plan.version, rows, predicate)
            self.stats.reads_checked += 1

    def _check_read_error(self, version: int | None, exc: Exception, newest_at_start: int | None) -> None:
        """A clean 'not found' is right only if the version expired, or the dataset did not
        exist at some moment during the read."""
        if version is None:
            snaps = self.observer.snapshots
            newest = max(snaps, default=None)
            window = range(newest_at_start, newest + 1) if newest_at_start is not None and newest is not None else ()
            absent = newest_at_start is None or any(snaps.get(v, 0) is None for v in window)
            if not absent:
                self.errors.append(f"reader: {exc!r} although the dataset existed throughout the read "
                                   f"(versions {newest_at_start}..{newest})")
            return
        try:
            entry = load.load_entry(self.raw, UUID, version)
        except VersionNotFoundError:
            return
        if entry.has_dataset:
            self.errors.append(f"reader: {exc!r} although version {version} is retained")

    # -- run ------------------------------------------------------------------------------

    def run(self) -> Stats:
        # format 2: short checkpoint intervals too, so schedules replay chains across
        # checkpoints that writers and GC write (and that faults interrupt)
        import kstore.blocks.commit as commit_block

        interval = random.Random(self.seed ^ 0xC4EC).choice([2, 3, 5, 10])
        saved, commit_block.CHECKPOINT_INTERVAL = commit_block.CHECKPOINT_INTERVAL, interval
        try:
            return self._run()
        finally:
            commit_block.CHECKPOINT_INTERVAL = saved

    def _run(self) -> Stats:
        with runtime.installed(self.clock):
            if not self.config.create_concurrently:
                init = Op("create", ("init", 1), rows=self._rows(4))
                self.observer.ops[init.tag] = init
                # two chunks: two files in some partitions, so the compactor has work from the start
                kstore.store_dataset(self.raw, UUID, iter([frame(init.rows[:2]), frame(init.rows[2:])]),
                                     partition_on="p", secondary_indices="x", txn=init.tag)
            self.observer.check()
            actors: dict[str, Callable[[], None]] = {}
            for w in range(self.config.writers):
                plan = self._plan_writer(w)
                actors[f"w{w}"] = lambda n=f"w{w}", p=plan: self._writer(n, p)
            if self.config.compactions:
                compactor = self._plan_compactor()
                actors["c"] = lambda: self._writer("c", compactor)
            actors["gc"] = lambda: self._gc("gc")
            actors["r"] = lambda: self._reader("r")
            threads = []
            for name, body in actors.items():
                self.sched.alive.add(name)
                t = threading.Thread(target=self._actor_main, args=(name, body), daemon=True)
                threads.append(t)
                t.start()
            try:
                while self.sched.step():
                    self.sched.wait_quiet()
                    self.observer.check()
                    if self.stats.steps > self.config.max_steps:
                        self.observer.fail("the schedule did not finish")
            finally:
                with self.sched.cv:
                    self.sched.dead.update(actors)
                    self.sched.cv.notify_all()
            for t in threads:
                t.join(10)
            self.observer.check()
            self._check_outcomes()
            self._final_gc()
        self.stats.versions = len(self.observer.commit_ids)
        for o in self.outcomes:
            self.stats.outcomes[o.result] += 1
        return self.stats

    def _actor_main(self, name: str, body: Callable[[], None]) -> None:
        try:
            self.sched.yield_point(name, "start", "")
            body()
        except Killed:
            pass
        except BaseException as exc:  # reported as a violation by the main thread
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        finally:
            self.sched.finished(name)

    def _check_outcomes(self) -> None:
        obs = self.observer
        if self.errors:
            obs.fail("errors outside the KstoreError tree:\n" + "\n".join(self.errors))
        by_tag: dict[tuple[str, int], list[int]] = {}
        for v, tag in obs.tags.items():
            if tag is not None and obs.snapshots.get(v) is not None:
                by_tag.setdefault(tag, []).append(v)
        for o in self.outcomes:
            found = by_tag.get(o.op.tag, [])
            if len(found) > 1:
                obs.fail(f"{o.op.tag} {o.op.kind} was committed {len(found)} times: versions {found}")
            if o.result == "acked":
                if not found and not _noop(o.op, obs):
                    obs.fail(f"{o.op.tag} {o.op.kind} returned version {o.version} but no version carries it")
                if found and o.version is not None and o.version < found[0]:
                    obs.fail(f"{o.op.tag} returned version {o.version}, committed as {found[0]}")
            if o.result == "failed" and found:
                obs.fail(f"{o.op.tag} {o.op.kind} raised ({o.error}) but was committed as version {found[0]}")

    def _final_gc(self) -> None:
        """Quiet store: after a last GC, no orphan older than its retention is left."""
        obs = self.observer
        newest = max((v for v, s in obs.snapshots.items() if s is not None), default=None)
        self.clock.advance((LOG_MIN_AGE + timedelta(days=8)).total_seconds())
        try:
            kstore.garbage_collect(self.raw, UUID)
        except KstoreError as exc:
            if newest is not None and load.load_head(self.raw, UUID).meta is not None:
                obs.fail(f"the final GC failed: {exc!r}")
            return
        obs.dirty_log = True
        obs.check()
        head = load.load_head(self.raw, UUID)
        referenced: set[str] = set()
        for v in obs.retained:
            referenced |= obs.refs[v]
        main, _ = load.load_main(self.raw, UUID)
        if main is not None:
            referenced |= main.referenced_keys()
        for key in sorted(self.raw.iter_prefix(naming.dataset_prefix(UUID))):
            if "/_kstore/log/" in key or key.endswith("/" + naming.COMMON_METADATA):
                continue
            if key not in referenced:
                obs.fail(f"after the final GC an orphan is left: {key}")
        if head.meta is not None:
            rows = rows_of(kstore.read_table(self.raw, UUID))
            if rows != obs.snapshots[head.version]:
                obs.fail("the final read differs from the newest version's snapshot")
        else:
            try:
                kstore.read_table(self.raw, UUID)
            except KstoreError:
                pass
            else:
                obs.fail("the dataset reads although its newest version has no dataset")


def _noop(op: Op, obs: Observer) -> bool:
    """Operations that may legitimately commit nothing (a delete that matched no row)."""
    return op.kind in ("delete_scope", "delete_rows", "compact")
