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

The fault kinds of issue #29 (each a :class:`Config` switch, off by default: with them off a
seed replays the schedule it always did; they draw from their own random streams):

- ``clock_skew``: every actor's wall clock (``runtime.current().time()``/``now()``: file ids,
  log timestamps, GC cutoffs) is off by an offset drawn per schedule (0, +-5 min, +-2 h,
  +-8 days, +-30 days); ``monotonic()`` is not skewed;
- ``pause_rate``: an actor is paused for 16 min .. 4 h at a yield point (between the check it
  just made and the store call it guards) while the others go on and the clock advances;
- ``held_rate``: a ``put_if_absent`` is held: the store applies it (if the key is still
  absent) at a later step; its caller is told the connection dropped, or waits for the
  answer; meanwhile other conditional puts of the key are refused as S3 (False) or the
  object-store backend (StoreError) refuse them, and a get of the key finds nothing;
- ``recreate_cycles``: a recreator actor deletes the dataset and creates it again while
  writers hold snapshots of the old incarnation and commit through them; such a commit must
  conflict and never land in the new incarnation (the oracle knows each version's
  incarnation);
- ``damage_rate``: derived files (checkpoints, ``_last_checkpoint.json``, history summaries,
  the main file, ``_common_metadata``) are truncated or corrupted right after they are
  written; reads, writes and GC must go on returning exactly the committed rows (a
  ``CorruptMetadataError`` while every log entry is intact is a violation).
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
from kstore.blocks.gc import DEFAULT_LOG_RETENTION
from kstore.blocks.read import read_plan
from kstore.core import naming, runtime, serialize, sorted_index
from kstore.core.log import LOG_MIN_AGE
from kstore.eager import _plan_and_read
from kstore.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptMetadataError,
    DatasetNotFoundError,
    KeyNotFoundError,
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
    # -- the fault kinds of issue #29 (off: a seed's schedule is what it was before them) --
    #: every actor's wall clock is off by an offset drawn per schedule (minutes to days, both ways)
    clock_skew: bool = False
    #: chance per step that the chosen actor is paused (16 min .. 4 h) before its store call;
    #: 10 times as likely (and always over LOG_MIN_AGE) before a claim, a delete or a
    #: tombstone's put. The others go on meanwhile (the pause's time spreads over 100-400 of
    #: their steps, GC runs more often) and the actor's call is sent when the pause ends
    pause_rate: float = 0.0
    #: chance that a put_if_absent is held: it lands at a later step (its caller sees an
    #: error, or waits); conditional puts of the key are refused meanwhile
    held_rate: float = 0.0
    #: a recreator actor deletes the dataset and creates it again this many times, while
    #: writers hold snapshots of the old incarnation and commit through them
    recreate_cycles: int = 0
    #: chance that a derived file (checkpoint, _last_checkpoint, summary, main file,
    #: _common_metadata) is damaged right after it is written, and how
    damage_rate: float = 0.0
    damage_kinds: tuple[str, ...] = ("truncate", "empty", "garbage", "stale-hint")  # also "flip" (one bit)
    #: which derived files may be damaged (what :func:`derived_kind` names them)
    damage_targets: tuple[str, ...] = ("checkpoint", "_last_checkpoint", "history summary", "main file",
                                       "_common_metadata", "sorted index blocks")
    #: in recreate mode: chance that a snapshot operation waits for the re-creation before it commits
    stale_rate: float = 0.6
    #: each schedule draws which fault kinds of issue #29 it adds (each with chance 1/2, at
    #: least one; :func:`mixed`), so every interleaving meets them together as well
    mix_fault_kinds: bool = False
    #: chance that a writer's operation (not its first) is a ``kstore.restore`` of the version
    #: 1-3 back from the newest it sees (its own random stream: the other draws stay as they were)
    restore_rate: float = 0.0
    #: chance that a writer's operation (not its first) is a ``kstore.merge`` by ``rid`` (rows
    #: of ids planned before, some moved to another partition, and new rows) or an
    #: ``update_rows`` of the rows with one ``x`` (their own random stream too)
    upsert_rate: float = 0.0
    #: chance that a writer's operation (not its first) renames the column ``x`` to ``y`` or
    #: back (``kstore.rename_columns``, no data file rewritten); every operation then asks for
    #: the column's name first (a store call: a rename may commit between), and a write that
    #: read the other name must fail, never commit values under the wrong column (#33)
    rename_rate: float = 0.0
    #: chance that a writer's operation (not its first) appends rows whose ``rid`` is a double:
    #: ``schema_mode="merge"`` widens the int64 column (every value is exact in a double; the
    #: commit checks the statistics again), beside every other writer (#33's type widening)
    widen_rate: float = 0.0
    #: the ``log_retention`` of every garbage collection (None: by the seed, see Simulation)
    log_retention: timedelta | None = None


#: one setting per fault kind of issue #29 (``python -m tests.simulation.run --mode <kind>``,
#: ``test_fault_kind`` in the suite); each adds one kind to the default schedule
FAULT_KINDS: dict[str, Config] = {
    "clock-skew": Config(clock_skew=True, gc_runs=10, kill_rate=0.002),
    # (fewer kills: an actor that died early cannot act while another one is paused)
    "pauses": Config(pause_rate=0.01, gc_runs=30, ops_per_writer=5, writers=4, kill_rate=0.002,
                     retentions=(timedelta(seconds=2), timedelta(0))),
    "held-creates": Config(held_rate=0.25),
    "recreate": Config(recreate_cycles=2, snapshot_rate=0.8),
    "damaged-derived": Config(damage_rate=0.3),
    # (not a fault: restores, which bring back files of older versions, beside GC runs of
    # every retention; #33)
    "restores": Config(restore_rate=0.4, gc_runs=6, ops_per_writer=4),
    # (not a fault: upserts and updates by predicate beside every other writer, compaction and
    # GC; their conflict rules keep the model's row ids unique and every version exact; #33)
    "row-changes": Config(upsert_rate=0.5, restore_rate=0.1, gc_runs=4, ops_per_writer=4),
    # (not a fault: column renames, x <-> y, beside appends, row changes, restores, compaction
    # and GC: readers see every version's rows under that version's name; #33)
    "renames": Config(rename_rate=0.5, widen_rate=0.3, upsert_rate=0.2, restore_rate=0.1, gc_runs=4,
                      ops_per_writer=4),
}


#: what each fault kind adds to a mixed schedule (lighter than its own mode, where it runs
#: alone with more garbage collections and operations)
_MIXED: dict[str, dict[str, Any]] = {
    "clock-skew": {"clock_skew": True, "gc_runs": 4, "kill_rate": 0.005},
    "pauses": {"pause_rate": 0.01, "gc_runs": 6, "kill_rate": 0.005,
               "retentions": (timedelta(seconds=2), timedelta(0))},
    "held-creates": {"held_rate": 0.25},
    "recreate": {"recreate_cycles": 1, "snapshot_rate": 0.8},
    "damaged-derived": {"damage_rate": 0.3},
}


#: the fault kinds a mixed schedule draws from (the modes of #33 in FAULT_KINDS are no faults)
MIXED_KINDS: tuple[str, ...] = tuple(_MIXED)


def mixed(seed: int, base: Config) -> tuple[Config, tuple[str, ...]]:
    """``base`` with the fault kinds this seed draws (each with chance 1/2, at least one),
    and their names. Garbage collections take the most, kill rates the least any kind asks."""
    rng = random.Random(seed ^ 0x5EED_F00D)
    kinds = tuple(k for k in _MIXED if rng.random() < 0.5) or (rng.choice(list(_MIXED)),)
    extra: dict[str, Any] = {}
    for kind in kinds:
        for key, value in _MIXED[kind].items():
            if key == "gc_runs":
                value = max(value, extra.get(key, base.gc_runs))
            elif key == "kill_rate":
                value = min(value, extra.get(key, base.kill_rate))
            extra[key] = value
    return replace(base, mix_fault_kinds=False, **extra), kinds


@dataclass
class Stats:
    steps: int = 0
    faults: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    versions: int = 0
    reads_checked: int = 0
    committed: Counter = field(default_factory=Counter)  # versions by operation kind
    kinds: Counter = field(default_factory=Counter)  # schedules by fault kind drawn (mixed)
    restores: int = 0  # kstore.restore calls started (restores mode)
    row_changes: int = 0  # kstore.merge and update_rows calls started (row-changes mode)
    renames: int = 0  # kstore.rename_columns calls started (renames mode)
    widens: int = 0  # appends of double rids with schema_mode="merge" started (renames mode)


# ---------------------------------------------------------------------------------------
# runtime and scheduler
# ---------------------------------------------------------------------------------------


#: wall-clock offsets an actor may get with ``Config.clock_skew`` (seconds)
CLOCK_OFFSETS = (300, -300, 7200, -7200, 8 * 86400, -8 * 86400, 30 * 86400, -30 * 86400)
#: calls that are no store call: an actor waiting for something (never a fault)
_NO_CALL = ("start", "held-wait", "stale-wait", "await-stale")


def offset_text(seconds: float) -> str:
    """``+8d``, ``-2h``, ``+5min``, ``0``."""
    if not seconds:
        return "0"
    sign = "+" if seconds > 0 else "-"
    s = abs(seconds)
    if s >= 86400:
        return f"{sign}{s / 86400:.3g}d"
    if s >= 3600:
        return f"{sign}{s / 3600:.3g}h"
    return f"{sign}{s / 60:.3g}min"


def derived_kind(key: str) -> str | None:
    """What kind of derived file (FORMAT.md E) ``key`` is, or None for any other key."""
    if naming.version_from_checkpoint_key(UUID, key) is not None:
        return "checkpoint"
    if naming.version_from_summary_key(UUID, key) is not None:
        return "history summary"
    if naming.version_from_sorted_index_key(UUID, key) is not None:
        return "sorted index blocks"
    if key == naming.last_checkpoint_key(UUID):
        return "_last_checkpoint"
    if naming.METADATA_MARKER in key:
        return "main file"
    if key.endswith("/" + naming.COMMON_METADATA):
        return "_common_metadata"
    return None


def _is_log_key(key: str) -> bool:
    return naming.version_from_log_key(UUID, key) is not None


def _guarded(method: str, key: str) -> bool:
    """Calls a check just before guards: a claim (after the base-age check), a delete (after
    GC decided), a tombstone's put. ``Config.pause_rate`` pauses before them 10 times as often."""
    return method == "delete" or (method in ("put_if_absent", "put") and _is_log_key(key))


class SimRuntime(runtime.FixedRuntime):
    """The simulated clock (starts at :data:`EPOCH`), seeded entropy, one thread per pool.

    ``offsets`` skews the wall clock per actor (actors are threads; :meth:`bind` names the
    calling thread's actor): ``time()``/``now()`` return the shared simulated time plus the
    actor's offset, ``monotonic()`` the shared time (a monotonic clock never jumps with the
    wall clock). The main thread (observer, final GC) has no offset.
    """

    def __init__(self, seed: int, offsets: dict[str, float] | None = None) -> None:
        super().__init__(EPOCH, seed ^ 0x5EED)
        self.offsets = dict(offsets or {})
        self._local = threading.local()

    def bind(self, actor: str) -> None:
        self._local.actor = actor

    def offset(self, actor: str | None = None) -> float:
        return self.offsets.get(actor if actor is not None else getattr(self._local, "actor", ""), 0.0)

    def time(self) -> float:
        return self._t + self.offset()

    def monotonic(self) -> float:
        return self._t


@dataclass
class Held:
    """A held ``put_if_absent``: the store applies it at ``land_step`` (if the key is absent)."""

    key: str
    data: bytes
    actor: str
    step: int
    at: float
    land_step: int
    wait: bool  # the caller waits for the answer (else it was told the connection dropped)
    done: bool = False
    result: bool | None = None


class Scheduler:
    """Runs one actor at a time; every store call (and an actor's start) is a yield point."""

    def __init__(self, seed: int, config: Config, clock: SimRuntime, stats: Stats) -> None:
        self.rng = random.Random(seed)
        # the fault kinds of issue #29 draw from their own stream: with them off, the
        # schedules of every seed are what they were before they existed
        self.frng = random.Random(seed ^ 0xFA17)
        self.config, self.clock, self.stats = config, clock, stats
        self.cv = threading.Condition()
        self.waiting: dict[str, tuple[str, str, float]] = {}  # actor -> (method, key, since)
        self.running: str | None = None
        self.grant: tuple[str, str] | None = None  # (actor, fate)
        self.dead: set[str] = set()
        self.stopped = False
        self.trace: list[str] = []
        self.alive: set[str] = set()
        self.paused: dict[str, float] = {}  # actor -> simulated time it resumes
        self.pause_steps: dict[str, int] = {}  # actor -> the step by which its pause should end
        self.resumed: set[str] = set()  # paused before the call it waits to make (once per call)
        self.blocked: dict[str, tuple[str, Callable[[], bool]]] = {}  # actor -> (why, released when true)
        self.held: dict[str, Held] = {}  # key -> the held put_if_absent
        self.damaged: dict[str, tuple[bytes, str, int, str]] = {}  # key -> (bytes, how, step, actor)
        self.notes: list[str] = []  # fault events, quoted in violation messages
        # how a conditional put of a held key is refused: S3 answers 409 (kstore's S3Store
        # retries, then returns False); the object-store backend raises StoreError
        self.flavour = self.frng.choice(["s3", "objstore"]) if config.held_rate else "s3"
        self.raw: Any = None  # set by the simulation (held puts land on it, damage is done on it)
        self.observer: Observer | None = None

    def now(self) -> float:
        return self.clock.monotonic()

    def tstamp(self) -> str:
        return f"t={self.now() - EPOCH:.1f}"

    def note(self, line: str) -> None:
        self.notes.append(line)
        self.trace.append(line)

    def describe(self) -> str:
        """The fault setting of this schedule (for violation messages)."""
        c, out = self.config, []
        if c.clock_skew:
            out.append("clock offsets: " + ", ".join(f"{a} {offset_text(o)}" for a, o in sorted(self.clock.offsets.items())))
        if c.held_rate:
            out.append(f"held put_if_absent: conditional puts of a held key are refused as "
                       f"{'S3 (False)' if self.flavour == 's3' else 'the object-store backend (StoreError)'}")
        if self.damaged:
            out.append("derived files damaged: " + "; ".join(f"{k} ({how} at step {st}, written by {a})"
                                                             for k, (_, how, st, a) in sorted(self.damaged.items())))
        return "\n".join(out)

    # called from actor threads
    def yield_point(self, actor: str, method: str, key: str,
                    until: Callable[[], bool] | None = None) -> str:
        with self.cv:
            self.waiting[actor] = (method, key, self.now())
            if until is not None:
                self.blocked[actor] = (method, until)
            if self.running == actor:
                self.running = None
            self.cv.notify_all()
            while not (self.grant is not None and self.grant[0] == actor):
                if self.stopped:
                    self.waiting.pop(actor, None)
                    raise Killed(actor)
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

    def stop(self) -> None:
        with self.cv:
            self.stopped = True
            self.cv.notify_all()

    def hold(self, actor: str, key: str, data: bytes, wait: bool) -> Held:
        """Hold ``actor``'s ``put_if_absent`` of ``key`` (called while the actor runs)."""
        h = Held(key, data, actor, self.stats.steps, self.now(),
                 self.stats.steps + (self.frng.randint(1, 8) if wait else self.frng.randint(1, 40)), wait)
        self.held[key] = h
        self.stats.faults["held-wait" if wait else "held-error"] += 1
        self.note(f"  {actor}: put_if_absent {key} is HELD until step {h.land_step} "
                  f"({'the caller waits for the answer' if wait else 'the caller is told the connection dropped'})")
        return h

    def held_conflict(self, actor: str, key: str) -> bool:
        """A conditional put of a held key, answered as the backend answers it."""
        h = self.held[key]
        self.stats.faults["held-conflict"] += 1
        self.note(f"  {actor}: put_if_absent {key} refused ({self.flavour}): {h.actor}'s put of it is in flight")
        if self.flavour == "objstore":
            raise StoreError(f"injected: conditional put {key}: 409 conflict (a create of it is in flight)")
        return False

    def damage(self, actor: str, key: str, data: bytes) -> None:
        """Damage the derived file ``actor`` just wrote (truncate, empty, garbage, flip, stale hint)."""
        kinds = [k for k in self.config.damage_kinds if k != "stale-hint" or key == naming.last_checkpoint_key(UUID)]
        how = self.frng.choice(kinds) if kinds else "truncate"
        if how == "truncate":
            bad = data[: self.frng.randrange(max(1, len(data)))]
        elif how == "empty":
            bad = b""
        elif how == "garbage":
            bad = self.frng.randbytes(max(1, len(data)))
        elif how == "flip":
            i = self.frng.randrange(max(1, len(data)))
            bad = data[:i] + bytes([(data[i:i + 1] or b"\0")[0] ^ (1 << self.frng.randrange(8))]) + data[i + 1:]
        else:  # stale-hint: _last_checkpoint names another version (gone, never written, or future)
            bad = serialize.dumps({"version": self.frng.randrange(0, 40)}, "json")
            how = f"stale-hint {bad.decode()}"
        self.raw.put(key, bad)
        self.damaged[key] = (bad, how, self.stats.steps, actor)
        self.stats.faults["damage"] += 1
        self.note(f"  {actor}: {derived_kind(key)} {key} DAMAGED after the put ({how}, {len(data)} -> {len(bad)} bytes)")

    def damage_note(self) -> str:
        """``; damaged now: checkpoint .../5.checkpoint.arrow (truncate, step 120, by w1)``, or ''."""
        now = [f"{derived_kind(k)} {k.rsplit('/', 1)[-1]} ({how}, step {st}, by {a})"
               for k, (_, how, st, a) in sorted(self.damaged.items()) if self.damaged_now(k)]
        return f"; derived files damaged now: {', '.join(now)}" if now else ""

    def damaged_now(self, key: str) -> str | None:
        """How ``key`` is damaged, when it still holds the bytes the injector left there."""
        d = self.damaged.get(key)
        if d is None:
            return None
        try:
            cur = self.raw.get(key)
        except KstoreError:
            return None
        return d[1] if cur == d[0] else None

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
            if self.held and self._land_due():
                return True
            if not self.waiting:
                if self.held:
                    self._land(min(self.held.values(), key=lambda h: h.land_step).key)
                    return True
                return False
            if self.paused:
                self._resume_due()
            names = sorted(self.waiting)
            eligible = [a for a in names if self._eligible(a)]
            if not eligible:
                self._unblock()
                return True
            forced = [a for a in eligible if self._claim_overdue(a)]
            if not forced and self.paused and "gc" in eligible and self.frng.random() < 0.3:
                actor = "gc"  # a GC keeps going (every few minutes) while an actor is paused
            else:
                actor = forced[0] if forced else self.rng.choice(eligible)
            method, key, _ = self.waiting[actor]
            if self.config.pause_rate and not forced and method not in _NO_CALL and actor not in self.resumed \
                    and self.frng.random() < self.config.pause_rate * (10 if _guarded(method, key) else 1):
                self._pause(actor, method, key)
                return True
            self.resumed.discard(actor)
            fate = self._fate(method, key)
            self._advance_clock(forced_claims=bool(forced))
            self.stats.steps += 1
            self.trace.append(f"{self.stats.steps} {self.tstamp()} {actor} {method} {key} {fate}")
            self.grant = (actor, fate)
            self.running = actor
            self.cv.notify_all()
        return True

    def _eligible(self, actor: str) -> bool:
        if actor in self.paused:
            return False
        b = self.blocked.get(actor)
        if b is not None:
            if not b[1]():
                return False
            del self.blocked[actor]
        return True

    def _pause(self, actor: str, method: str, key: str) -> None:
        long = _guarded(method, key) or self.frng.random() < 0.5
        seconds = self.frng.uniform(61 * 60, 4 * 3600) if long else self.frng.uniform(16 * 60, 59 * 60)
        self.paused[actor] = self.now() + seconds
        # the others go on at their pace meanwhile: the pause spreads over this many steps
        self.pause_steps[actor] = self.stats.steps + self.frng.randint(100, 400)
        self.stats.faults["pause"] += 1
        self.stats.steps += 1
        self.note(f"{self.stats.steps} {self.tstamp()} {actor} PAUSED for {seconds / 60:.0f} min before "
                  f"{method} {key} (its checks are done; resumes at t={self.paused[actor] - EPOCH:.1f})")

    def _resume_due(self) -> None:
        now = self.now()
        for actor, t in sorted(self.paused.items()):
            if now >= t:
                del self.paused[actor], self.pause_steps[actor]
                self.resumed.add(actor)
                method, key, _ = self.waiting[actor]
                self.waiting[actor] = (method, key, now)  # the call is sent now
                self.trace.append(f"  {self.tstamp()} {actor} resumes: its pause ended at t={t - EPOCH:.1f}")

    def _unblock(self) -> None:
        """No actor can go on: land a held put, release a waiting actor, or let a pause end."""
        if self.held:
            self._land(min(self.held.values(), key=lambda h: h.land_step).key)
            return
        self.stats.steps += 1
        for why in ("await-stale", "stale-wait"):
            released = [a for a, (w, _) in self.blocked.items() if w == why]
            if released:
                for a in released:
                    del self.blocked[a]
                self.trace.append(f"{self.stats.steps} {self.tstamp()} released {released} ({why}): nothing else can run")
                return
        if self.paused:
            t = min(self.paused.values())
            self.clock.advance(max(0.0, t - self.now()))
            self.trace.append(f"{self.stats.steps} {self.tstamp()} the clock jumps to the end of a pause")
            return
        raise AssertionError("no actor can run, and none is paused, blocked or held")  # pragma: no cover

    def _land_due(self) -> bool:
        now = self.now()
        due = [h for h in self.held.values()
               if h.land_step <= self.stats.steps or now - h.at > MAX_CALL_TIME.total_seconds() / 2]
        if not due:
            return False
        self._land(min(due, key=lambda h: (h.land_step, h.key)).key)
        return True

    def _land(self, key: str) -> None:
        h = self.held.pop(key)
        self.stats.steps += 1
        h.result = bool(self.raw.put_if_absent(key, h.data))
        h.done = True
        self.stats.faults["land"] += 1
        assert self.observer is not None
        if h.result:
            self.observer.mutated("put_if_absent", key, h.actor)
            self.observer.landed[key] = (h.actor, h.step, self.stats.steps, h.wait)
        self.note(f"{self.stats.steps} {self.tstamp()} {h.actor}'s held put_if_absent {key} LANDS: "
                  f"{'applied' if h.result else 'the key exists, not applied'} (held at step {h.step}; "
                  f"{'its caller waits' if h.wait else 'its caller was told the connection dropped'})")

    def _claim_overdue(self, actor: str) -> bool:
        method, key, since = self.waiting[actor]
        return (method == "put_if_absent" and "/_kstore/log/" in key
                and self.now() - since > MAX_CALL_TIME.total_seconds() / 2)

    def _fate(self, method: str, key: str) -> str:
        if method in _NO_CALL:
            return "ok"
        r = self.rng.random()
        c = self.config
        if r < c.kill_rate:
            fate = self.rng.choice(["kill-before", "kill-after"])
        elif r < c.kill_rate + c.fault_rate:
            fate = self.rng.choice(["error-before", "error-after", "slow"])
        else:
            if c.held_rate and method == "put_if_absent" and key not in self.held \
                    and self.frng.random() < c.held_rate and not self.raw.exists(key):  # (exists: 412 at once)
                return self.frng.choice(["held-error", "held-wait"])
            if c.damage_rate and method == "put" and derived_kind(key) in c.damage_targets \
                    and self.frng.random() < c.damage_rate:
                return "damage"
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
        if self.paused:  # time passes while an actor is paused, spread over the steps of its pause
            actor = min(self.paused, key=lambda a: self.paused[a])
            left = self.paused[actor] - self.now()
            if left > 0:
                # (at most 5 min a step: a claim waits at most MAX_CALL_TIME / 2, then it is forced)
                self.clock.advance(min(300.0, left / max(1, self.pause_steps[actor] - self.stats.steps)))

    def _claims_pending(self) -> bool:
        """A claim is in flight (the protocol assumes a store call ends within MAX_CALL_TIME):
        waiting to be sent (not paused before it), or held by the store."""
        return (any(m == "put_if_absent" and "/_kstore/log/" in k
                    for a, (m, k, _) in self.waiting.items() if a not in self.paused)
                or any(_is_log_key(k) for k in self.held))


class SimStore:
    """One actor's view of the shared store: every call yields to the scheduler."""

    def __init__(self, inner: Any, sched: Scheduler, actor: str, observer: Observer) -> None:
        self.inner, self.sched, self.actor, self.observer = inner, sched, actor, observer
        self.url = None
        self.atomic_create = True

    def __repr__(self) -> str:
        return f"SimStore({self.actor})"

    def _call(self, method: str, key: str, fn: Callable[[], Any], mutates: bool, data: bytes | None = None) -> Any:
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
        if fate in ("held-error", "held-wait"):
            assert data is not None
            h = self.sched.hold(self.actor, key, data, fate == "held-wait")
            if not h.wait:
                raise StoreError(f"injected: the connection dropped during put_if_absent {key} "
                                 "(the request is held by the store and may still land)")
            self.sched.yield_point(self.actor, "held-wait", key, until=lambda: h.done)
            return h.result
        result = fn()
        if mutates:
            self.observer.mutated(method, key, self.actor)
        if fate == "damage":
            assert data is not None
            self.sched.damage(self.actor, key, data)
        if fate == "kill-after":
            self.sched.dead.add(self.actor)
            raise Killed(self.actor)
        if fate == "error-after":
            raise StoreError(f"injected failure after {method} {key}")
        return result

    def wait(self, why: str, until: Callable[[], bool]) -> None:
        """Wait (no store call) until ``until()`` holds, or until nothing else can run."""
        if self.actor in self.sched.dead:
            raise Killed(self.actor)
        self.sched.stats.faults[why] += 1
        self.sched.yield_point(self.actor, why, "", until=until)

    def get(self, key: str) -> bytes:
        return self._call("get", key, lambda: self.inner.get(key), False)

    def put(self, key: str, data: bytes) -> None:
        return self._call("put", key, lambda: self.inner.put(key, data), True, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        def create() -> bool:
            if key in self.sched.held:  # another create of the key is in flight
                return self.sched.held_conflict(self.actor, key)
            return bool(self.inner.put_if_absent(key, data))

        return self._call("put_if_absent", key, create, True, data)

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
    kind: str  # create | append | overwrite | delete_scope | delete_rows | build_indices | drop_indices | compact
    #          | restore (x: how many versions back from the newest it sees)
    #          | merge (rows: upserted by rid) | update (rows with x get (x + 1) % 6, and p = partition if set)
    tag: tuple[str, int]
    rows: tuple[tuple[int, str, int], ...] = ()
    partition: str | None = None
    x: int | None = None
    snapshot: bool = False  # run as a typed operation of a snapshot opened first
    stale: bool = False  # (recreate mode) the snapshot is held until the dataset was deleted and re-created

    def apply(self, before: Rows | None) -> Rows:
        base = before or frozenset()
        if self.kind == "create":
            return frozenset(self.rows)
        if self.kind in ("append", "widen"):
            return base | frozenset(self.rows)
        if self.kind == "overwrite":
            touched = {p for _, p, _ in self.rows}
            return frozenset(r for r in base if r[1] not in touched) | frozenset(self.rows)
        if self.kind == "delete_scope":
            return frozenset(r for r in base if r[1] != self.partition)
        if self.kind == "delete_rows":
            return frozenset(r for r in base if r[2] != self.x)
        if self.kind == "merge":
            keys = {r[0] for r in self.rows}
            return frozenset(r for r in base if r[0] not in keys) | frozenset(self.rows)
        if self.kind == "update":
            new_x = (self.x + 1) % 6 if self.x is not None else None
            return frozenset((rid, self.partition or p, new_x) if x == self.x else (rid, p, x) for rid, p, x in base)
        return base


def frame(rows, x: str = "x") -> pd.DataFrame:
    """The model's rows as written; ``x``: the name the version written to gives the column."""
    return pd.DataFrame({"p": [r[1] for r in rows], "rid": [r[0] for r in rows], x: [r[2] for r in rows]})


def x_name(names: Any) -> str:
    """The name a version gives the model's column x (``y`` after an odd number of renames)."""
    return "y" if "y" in names else "x"


def rows_of(table: pa.Table) -> Rows:
    d = table.to_pydict()
    return frozenset(zip(d["rid"], d["p"], d[x_name(d)]))


def duplicates(rids: list[int]) -> list[int]:
    """Row ids read more than once (every row of the model has its own id)."""
    return sorted(r for r, n in Counter(rids).items() if n > 1)


# ---------------------------------------------------------------------------------------
# observer: checks the store itself after every step
# ---------------------------------------------------------------------------------------


class Observer:
    def __init__(self, raw: Any, seed: int, sched: Scheduler) -> None:
        self.raw, self.seed, self.sched = raw, seed, sched
        self.rng = random.Random(seed ^ 0x0B5E)
        self.commit_ids: dict[int, str | None] = {}
        self.void_ids: set[Any] = set()  # commit ids of void claims (FORMAT.md C)
        self.snapshots: dict[int, Rows | None] = {}  # None: a version without a dataset
        self.tags: dict[int, tuple[str, int] | None] = {}
        self.meta_dicts: dict[int, dict] = {}
        self.refs: dict[int, frozenset[str]] = {}
        self.retained: set[int] = set()
        self.ops: dict[tuple[str, int], Op] = {}
        self.dirty_log = True
        self.deleted: list[tuple[str, str]] = []  # (key, actor) since the last check
        self.deletions: list[tuple[str, str, int]] = []  # (key, actor, step), all of them
        self.main_dirty = True
        self.lock = threading.Lock()
        # what each version is, for the messages: operation, txn, timestamp, commit id
        self.entry_info: dict[int, str] = {}
        self.log_deleted: dict[int, list[str]] = {}  # version -> who deleted its entry, when
        self.landed: dict[str, tuple[str, int, int, bool]] = {}  # key -> (actor, held at, landed at, caller waited)
        # incarnations: a version with a dataset whose predecessor has none starts a new one
        self.incarnation: dict[int, int] = {}
        self.incarnations = 0
        self.created_at: dict[int, int] = {}  # incarnation -> its first version
        self.delete_versions: list[int] = []
        self.seen_at: dict[int, int] = {}  # version -> the step after which the observer first saw it
        self.fence_ops: dict[int, str] = {}  # version -> "vacuum"/"delete" for fences (GC and delete_dataset)
        #: op tag -> (snapshot version, its incarnation) per attempt: a typed operation of a
        #: snapshot must commit into the incarnation of its snapshot, or not at all
        self.bases: dict[tuple[str, int], list[tuple[int, int | None]]] = {}

    def fail(self, what: str) -> None:
        setting = self.sched.describe()
        notes = self.sched.notes[-40:]
        raise Violation(f"seed {self.seed}: {what}\n"
                        + (f"--- faults ---\n{setting}\n" if setting else "")
                        + ("--- fault events (last 40) ---\n" + "\n".join(notes) + "\n" if notes else "")
                        + "--- schedule ---\n" + "\n".join(self.sched.trace[-400:]))

    def mutated(self, method: str, key: str, actor: str = "?") -> None:
        with self.lock:
            if "/_kstore/log/" in key:
                self.dirty_log = True
            elif naming.METADATA_MARKER in key:
                self.main_dirty = True
            if method == "delete":
                self.deleted.append((key, actor))
                self.deletions.append((key, actor, self.sched.stats.steps))
                v = naming.version_from_log_key(UUID, key)
                if v is not None:
                    self.log_deleted.setdefault(v, []).append(
                        f"deleted by {self._who(actor)} at step {self.sched.stats.steps}")

    def _who(self, actor: str) -> str:
        """``gc (clock +8d)``: an actor and its clock offset, if it has one."""
        off = self.sched.clock.offset(actor)
        return f"{actor} (clock {offset_text(off)})" if off else actor

    def about(self, v: int) -> str:
        """What the observer knows of version ``v`` (for the messages)."""
        parts = [self.entry_info.get(v, "?")]
        if v in self.incarnation:
            parts.append(f"incarnation {self.incarnation[v]}")
        key = naming.log_key(UUID, v)
        if key in self.landed:
            a, held, landed, waited = self.landed[key]
            parts.append(f"landed at step {landed} from {a}'s put_if_absent held since step {held} "
                         f"({'its caller waited' if waited else 'its caller was told the connection dropped'})")
        if v in self.log_deleted:
            parts.append("entry " + "; ".join(self.log_deleted[v]))
        return ", ".join(parts)

    def note_base(self, tag: tuple[str, int], version: int | None) -> int | None:
        """A writer opened a snapshot of ``version`` for the operation ``tag``; returns its incarnation."""
        inc = self.incarnation.get(version) if version is not None else None
        self.bases.setdefault(tag, []).append((version if version is not None else -1, inc))
        return inc

    def check(self) -> None:
        with self.lock:
            dirty, self.dirty_log = self.dirty_log, False
            deleted, self.deleted = self.deleted, []
            main_dirty, self.main_dirty = self.main_dirty, False
        if dirty:
            self._scan_log()
        for key, actor in deleted:
            users = [v for v in self.retained if key in self.refs.get(v, ())]
            if users:
                self.fail(f"{key} was deleted by {self._who(actor)}, but retained version(s) {sorted(users)} "
                          f"reference it ({'; '.join(f'{u}: {self.about(u)}' for u in sorted(users)[:3])})")
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
            if (raw_entry.get("operation") in ("delete", "vacuum") and not raw_entry.get("expired")
                    and raw_entry.get("metadata") is None and raw_entry.get("actions") is None):
                deletes.append(v)  # a deletion, or a GC of a dataset that did not exist: history ends there
            cid = raw_entry.get("commit_id")
            if v in self.commit_ids and self.commit_ids[v] != cid and self._void_claim(v, cid, raw_entry):
                continue  # a void claim of a number used before: never a version (FORMAT.md C)
            if v in self.commit_ids and self.commit_ids[v] != cid:
                self.fail(f"version {v} was claimed twice: first {self.about(v)}; now "
                          f"{_describe_entry(raw_entry)} (commit ids {self.commit_ids[v]} and {cid})")
            if raw_entry.get("expired"):
                self.retained.discard(v)
                if v not in self.commit_ids:
                    self.fail(f"version {v} appeared as a tombstone without having been committed "
                              f"({_describe_entry(raw_entry)})")
                continue
            if v in self.commit_ids:
                continue
            self.commit_ids[v] = cid
            self.entry_info[v] = _describe_entry(raw_entry)
            self.seen_at[v] = self.sched.stats.steps
            if raw_entry.get("operation") in ("vacuum", "delete"):
                self.fence_ops[v] = raw_entry["operation"]
                if raw_entry.get("orphan_cutoff_ms") is not None:
                    cut = raw_entry["orphan_cutoff_ms"] / 1000 - self.sched.now()
                    self.entry_info[v] += f" cutoff {offset_text(round(cut))} from the shared clock"
            self._new_version(v, raw_entry)
        for v in list(self.retained):
            if v not in present:
                self.retained.discard(v)
        self._check_history(max(deletes))

    def _void_claim(self, v: int, cid: Any, raw_entry: dict) -> bool:
        """A second claim of ``v`` (its first entry was deleted) is allowed when the log proves
        it void: the entry after it names the first claim as its parent (its writer must then
        retract it, and no reader may build on it: readers check the same link). A retracted
        void claim is a tombstone with the void's commit id."""
        if raw_entry.get("expired"):
            return cid in self.void_ids
        try:
            nxt = serialize.loads(self.raw.get(naming.log_key(UUID, v + 1)), "json")
        except KeyNotFoundError:
            # its successor was deleted too: the writer cannot tell and must report
            # CommitStateUnknownError (the outcome check then accepts "not committed" only if
            # its rows are absent); readers checking the model catch any read of it
            self.void_ids.add(cid)
            return True
        if nxt.get("parent") == v and nxt.get("parent_commit_id") == self.commit_ids[v] != cid:
            self.void_ids.add(cid)
            return True
        return False

    def _check_history(self, deleted_at: int) -> None:
        """history() (from summaries, markers and entries) shows exactly the live versions
        since the last deletion; it may leave out a version GC marked expired and then died."""
        live = {v for v in self.retained if v > deleted_at}
        try:
            listed = kstore.history(self.raw, UUID)
        except DatasetNotFoundError:
            listed = []
        except KstoreError as exc:
            self.fail(f"history() failed on a quiet store: {exc!r}{self.sched.damage_note()}")
        # expired versions stay listed for the log retention (#33): each must be a version that
        # was committed (never a void claim) in this incarnation, and not a live one
        gone = {h.version: h for h in listed if h.expired}
        marked = set(load.list_log(self.raw, UUID).expired)  # (GC marks a version before its tombstone)
        for v in gone:
            if v <= deleted_at or v not in self.commit_ids or (v in live and v not in marked):
                self.fail(f"history() shows version {v} as expired, but it is "
                          f"{'live' if v in live else 'before the last deletion' if v <= deleted_at else 'no version'}")
            try:
                raw_entry = serialize.loads(self.raw.get(naming.log_key(UUID, v)), "json")
            except KeyNotFoundError:
                continue  # (deleted since: a concurrent GC)
            if raw_entry.get("commit_id") != self.commit_ids[v]:
                self.fail(f"history() shows version {v} as expired, but its entry is a void claim "
                          f"({_describe_entry(raw_entry)}; the version was {self.about(v)})")
        shown = {h.version: h for h in listed if not h.expired}
        if set(shown) - live:
            self.fail(f"history() shows versions {sorted(set(shown) - live)} that are expired or were never committed")
        # it leaves out a version that no read can rebuild now: one GC is expiring (its
        # predecessor's entry deleted first) or a void claim (FORMAT.md C)
        left_out = {v for v in (live - marked) - set(shown) if self._readable(v)}
        if left_out:
            self.fail(f"history() leaves out live versions {sorted(left_out)}")
        for v, h in shown.items():
            if h.txn != self.tags.get(v):
                self.fail(f"history() shows version {v} with txn {h.txn}, its entry says {self.tags.get(v)}")

    def _readable(self, v: int) -> bool:
        try:
            load.resolve_version(self.raw, UUID, v)
        except (VersionNotFoundError, CorruptMetadataError):  # (damage below a version GC is expiring)
            return False
        return True

    def _new_version(self, v: int, entry: dict) -> None:
        parent = entry.get("parent")
        if parent != (v - 1 if v > 0 else None):
            self.fail(f"version {v} names parent {parent} ({self.about(v)})")
        txn = tuple(entry["txn"]) if entry.get("txn") else None
        self.tags[v] = txn
        operation = entry.get("operation")
        self.sched.stats.committed[operation] += 1
        if v > 0 and v - 1 not in self.snapshots:
            self.fail(f"version {v} appeared but version {v - 1} was never seen ({self.about(v)})")
        before = self.snapshots.get(v - 1) if v > 0 else None
        if entry.get("metadata") is None and entry.get("actions") is None:
            if operation not in ("vacuum", "delete"):
                self.fail(f"version {v} ({operation}) has no metadata")
            if operation == "delete":
                self.delete_versions.append(v)
            self.snapshots[v] = None
            return
        if before is None:
            self.incarnations += 1
            self.created_at[self.incarnations] = v
        inc = self.incarnation[v] = self.incarnations if before is None else self.incarnation[v - 1]
        if operation == "vacuum":
            expected = before
            if before is None:
                self.fail(f"version {v} is a vacuum of a dataset that does not exist, with metadata")
        else:
            op = self.ops.get(txn) if txn else None
            if op is None:
                self.fail(f"version {v} ({operation}) carries an unknown transaction {txn}")
            expected = op.apply(before)
            if operation == "restore":  # the rows of the version it restored, as they read then
                target = (entry.get("info") or {}).get("restored_version")
                if target not in self.snapshots or self.snapshots[target] is None:
                    self.fail(f"version {v} restores version {target}, which had no dataset or was never seen "
                              f"({self.about(v)})")
                expected = self.snapshots[target]
            self._check_incarnation(v, op, inc)
        try:
            table = kstore.read_table(self.raw, UUID, version=v)
        except KstoreError as exc:
            self.fail(f"version {v} does not read the moment it is committed: {exc!r} ({self.about(v)}"
                      f"{self.sched.damage_note()})")
        got = rows_of(table)
        dupes = duplicates(table.column("rid").to_pylist())
        if dupes:
            self.fail(f"version {v} ({operation}, {txn}) reads rows twice: row ids {dupes[:5]} ({self.about(v)})")
        if got != expected:
            missing, extra = sorted((expected or frozenset()) - got)[:5], sorted(got - (expected or frozenset()))[:5]
            self.fail(f"version {v} ({operation}, {txn}) holds the wrong rows: missing {missing}, extra {extra} "
                      f"({self.about(v)})")
        self._check_indices(v, table)
        self.snapshots[v] = got
        try:
            meta = load.entry_metadata(self.raw, UUID, load.load_entry(self.raw, UUID, v))
        except KstoreError as exc:
            self.fail(f"the metadata of version {v} does not load the moment it is committed: {exc!r}"
                      f"{self.sched.damage_note()}")
        self.meta_dicts[v] = entry["metadata"] if entry.get("metadata") is not None else meta.to_dict()
        self.refs[v] = frozenset(meta.referenced_keys())
        gone = sorted(k for k in self.refs[v] if not self.raw.exists(k))
        if gone:  # (kstore reads data files only; kartothek reads the index files the main file names)
            self.fail(f"version {v} references {len(gone)} key(s) that do not exist the moment it is committed: "
                      f"{gone[:3]} ({self.about(v)}{self._deleted_by(gone)})")
        self.retained.add(v)

    def _deleted_by(self, keys: list[str]) -> str:
        who = [f"{k} deleted by {self._who(a)} at step {st}" for k, a, st in self.deletions if k in keys[:3]]
        return "; " + "; ".join(who[:3]) if who else ""

    def _check_incarnation(self, v: int, op: Op, inc: int) -> None:
        """A typed operation of a snapshot commits into its snapshot's incarnation or not at all."""
        bases = self.bases.get(op.tag)
        if not bases or any(i == inc for _, i in bases):
            return
        sv, si = bases[-1]
        deleted = [d for d in self.delete_versions if sv < d < v]
        self.fail(f"{op.kind} {op.tag} was built on a snapshot of version {sv} (incarnation {si}, created at "
                  f"version {self.created_at.get(si or 0)}), but committed as version {v} into incarnation {inc} "
                  f"(the dataset was deleted at version(s) {deleted} and re-created at version "
                  f"{self.created_at[inc]}): a stale snapshot's commit must conflict ({self.about(v)})")

    def _check_indices(self, v: int, table: pa.Table) -> None:
        """The index of x answers like a scan of the same version (one value per version)."""
        name = x_name(table.column_names)
        pairs = list(zip(table.column("rid").to_pylist(), table.column(name).to_pylist()))
        x = self.rng.randrange(6)
        try:
            hits = kstore.read_table(self.raw, UUID, version=v, predicates=[[(name, "==", x)]], columns=["rid"])
        except KstoreError as exc:
            self.fail(f"version {v}: a read with x == {x} fails the moment it is committed: {exc!r}"
                      f"{self.sched.damage_note()}")
        if sorted(hits.column("rid").to_pylist()) != sorted(r for r, xx in pairs if xx == x):
            self.fail(f"version {v}: the index on x answers x == {x} differently from a scan")

    def _check_main(self) -> None:
        if any(self.sched.damaged_now(naming.metadata_key(UUID, f)) for f in naming.METADATA_FORMATS):
            return  # the injector damaged it: kstore does not read it (derived), the next commit rewrites it
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

    def check_read(self, version: int, rows: Rows, predicate: Any, rids: list[int] | None = None) -> None:
        snap = self.snapshots.get(version)
        if snap is None:
            self.fail(f"a reader read version {version}, which the observer never saw with a dataset")
        want = snap if predicate is None else frozenset(r for r in snap if _matches(r, predicate))
        if rows != want:
            self.fail(f"a read of version {version} {predicate} returned {len(rows)} rows, expected {len(want)}: "
                      f"missing {sorted(want - rows)[:5]}, extra {sorted(rows - want)[:5]} ({self.about(version)})")
        dupes = duplicates(rids or [])
        if dupes:
            self.fail(f"a read of version {version} {predicate} returned row ids {dupes[:5]} more than once")


def _describe_entry(raw: dict) -> str:
    """``append ('w1', 2) at 2027-01-15T08:00:00+00:00``: what a log entry says it is."""
    txn = f" {tuple(raw['txn'])}" if raw.get("txn") else ""
    what = "tombstone of " if raw.get("expired") else ""
    return f"{what}{raw.get('operation')}{txn} (log timestamp {raw.get('timestamp')})"


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
        self.kinds: tuple[str, ...] = ()  # the fault kinds a mixed schedule drew
        if self.config.mix_fault_kinds:
            self.config, self.kinds = mixed(seed, self.config)
        self.raw = make_store()
        self.clock = SimRuntime(seed, self._offsets(seed))
        self.stats = Stats()
        self.stats.kinds.update(self.kinds)
        self.sched = Scheduler(seed, self.config, self.clock, self.stats)
        self.observer = Observer(self.raw, seed, self.sched)
        self.sched.raw, self.sched.observer = self.raw, self.observer
        if self.clock.offsets:
            self.stats.faults["skewed-clocks"] = sum(1 for o in self.clock.offsets.values() if o)
        self.rng = random.Random(seed * 7 + 1)
        # its own stream: the operations each seed plans stay what they were before
        self.snap_rng = random.Random(seed * 13 + 7)
        self.restore_rng = random.Random(seed * 17 + 3)  # (its own stream: the other draws stay as they were)
        self.upsert_rng = random.Random(seed * 19 + 11)  # (the same)
        self.rename_rng = random.Random(seed * 23 + 7)  # (the same)
        self.widen_rng = random.Random(seed * 29 + 13)  # (the same)
        # odd seeds keep expired versions' entries for the default log retention (30 days:
        # history lists them); even ones delete them after LOG_MIN_AGE, as before #33, which
        # exercises the claims of numbers whose entries are gone (FORMAT.md C)
        self.log_retention = (self.config.log_retention if self.config.log_retention is not None
                              else timedelta(0) if seed % 2 == 0 else DEFAULT_LOG_RETENTION)
        self.settled_rids = 0  # row ids 1..settled_rids were written before the writers started
        self.outcomes: list[Outcome] = []
        self.errors: list[str] = []
        self.gc_retentions: list[timedelta] = []
        self.next_rid = 0
        # recreate mode: which snapshot operations wait for the re-creation (own stream)
        self.stale_rng = random.Random(seed * 17 + 3)

    def _actor_names(self) -> list[str]:
        c = self.config
        return ([f"w{w}" for w in range(c.writers)] + (["c"] if c.compactions else []) + ["gc", "r"]
                + (["d"] if c.recreate_cycles else []))

    def _offsets(self, seed: int) -> dict[str, float]:
        """Clock offsets per actor (``Config.clock_skew``): 0 for some, minutes to days for the others."""
        if not self.config.clock_skew:
            return {}
        rng = random.Random(seed ^ 0xC10C)
        return {a: 0.0 if rng.random() < 0.35 else float(rng.choice(CLOCK_OFFSETS)) for a in self._actor_names()}

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
                if self.config.recreate_cycles:  # the operations a stale snapshot commits, mostly
                    kind = self.rng.choice(["append", "append", "drop_indices", "delete_rows", "build_indices",
                                            "overwrite", "delete_scope"])
                else:
                    kind = self.rng.choice(["append", "append", "append", "overwrite", "delete_scope",
                                            "delete_rows", "build_indices"])
                if kind == "overwrite":
                    op = Op(kind, tag, rows=self._rows(self.rng.randint(1, 2), (self.rng.choice(PARTITIONS),)))
                elif kind == "delete_scope":
                    op = Op(kind, tag, partition=self.rng.choice(PARTITIONS))
                elif kind == "delete_rows":
                    op = Op(kind, tag, x=self.rng.randrange(6))
                elif kind in ("build_indices", "drop_indices"):
                    op = Op(kind, tag)
                else:
                    op = Op(kind, tag, rows=self._rows(self.rng.randint(1, 3)))
            if (op.kind != "create" and j > 0 and self.config.restore_rate
                    and self.restore_rng.random() < self.config.restore_rate):  # (after the writer's first operation)
                op = Op("restore", tag, x=self.restore_rng.randint(1, 3))
            elif (op.kind != "create" and j > 0 and self.config.upsert_rate
                    and self.upsert_rng.random() < self.config.upsert_rate):
                op = self._row_change(tag)
            elif (op.kind != "create" and j > 0 and self.config.rename_rate
                    and self.rename_rng.random() < self.config.rename_rate):
                op = Op("rename", tag)
            elif (op.kind != "create" and j > 0 and self.config.widen_rate
                    and self.widen_rng.random() < self.config.widen_rate):
                op = Op("widen", tag, rows=self._rows(self.widen_rng.randint(1, 2)))
            if op.kind not in ("create", "restore") and self.snap_rng.random() < self.config.snapshot_rate:
                op = replace(op, snapshot=True)
                if self.config.recreate_cycles and self.stale_rng.random() < self.config.stale_rate:
                    op = replace(op, stale=True)
            retries = self.rng.choice([0, 0, 1, 2])  # txn retries after a failure
            ops.append((op, retries))
            self.observer.ops[tag] = op
        return ops

    def _row_change(self, tag: tuple[str, int]) -> Op:
        """A merge (ids planned before, in any partition, with new x values, and 1-2 new rows)
        or an update of the rows with one x (moving them to another partition half the time)."""
        rng = self.upsert_rng
        if rng.random() < 0.6:
            # ids of the rows written before the writers start: no other operation adds them
            # again (a planned append's ids may land after the merge inserted them)
            old = rng.sample(range(1, self.settled_rids + 1), min(self.settled_rids, rng.randint(1, 3)))
            rows = tuple((rid, rng.choice(PARTITIONS), rng.randrange(6)) for rid in sorted(old))
            fresh = []
            for _ in range(rng.randint(1, 2)):
                self.next_rid += 1  # (as _rows: the newest id given out)
                fresh.append((self.next_rid, rng.choice(PARTITIONS), rng.randrange(6)))
            return Op("merge", tag, rows=rows + tuple(fresh))
        return Op("update", tag, x=rng.randrange(6), partition=rng.choice([None, *PARTITIONS]))

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
        # the name the newest version gives x (renames mode: asked first, a store call of its own)
        x = x_name(kstore.read_schema(st, UUID).names) if self.config.rename_rate and op.kind != "create" else "x"
        if op.kind == "rename":
            self.stats.renames += 1
            return kstore.rename_columns(st, UUID, {x: "x" if x == "y" else "y"}, txn=op.tag)
        if op.kind == "widen":
            self.stats.widens += 1
            return kstore.update_dataset(st, UUID, frame(op.rows, x).astype({"rid": "float64"}), schema_mode="merge",
                                         txn=op.tag)
        if op.kind == "create":
            return kstore.store_dataset(st, UUID, frame(op.rows, x), partition_on="p", secondary_indices="x", txn=op.tag)
        if op.kind == "append":
            return kstore.update_dataset(st, UUID, frame(op.rows, x), txn=op.tag)
        if op.kind == "overwrite":
            return kstore.update_dataset(st, UUID, frame(op.rows, x), mode="overwrite_partitions", txn=op.tag)
        if op.kind == "delete_scope":
            return kstore.update_dataset(st, UUID, delete_scope=[{"p": op.partition}], txn=op.tag)
        if op.kind == "delete_rows":
            return kstore.delete_rows(st, UUID, [[(x, "==", op.x)]], txn=op.tag)
        if op.kind == "compact":
            done = kstore.compact(st, UUID, txn=op.tag)  # no store call after it returns
            return SimpleNamespace(version=done.version if done.committed is None else done.committed)
        if op.kind == "drop_indices":
            return kstore.drop_indices(st, UUID, [x], txn=op.tag)
        if op.kind == "merge":
            self.stats.row_changes += 1
            return kstore.merge(st, UUID, frame(op.rows, x), on="rid", txn=op.tag).dataset
        if op.kind == "update":
            self.stats.row_changes += 1
            return kstore.update_rows(st, UUID, [[(x, "==", op.x)]], set=_update_values(op, x), txn=op.tag).dataset
        if op.kind == "restore":
            self.stats.restores += 1
            newest = kstore.load_metadata(st, UUID).version or 0
            return kstore.restore(st, UUID, max(0, newest - (op.x or 1)), txn=op.tag)
        return kstore.build_indices(st, UUID, [x], txn=op.tag)

    def _run_on_snapshot(self, st: SimStore, op: Op) -> Any:
        """The typed operation of a snapshot opened first: every store call of the open and
        of the operation is a yield point, so other actors commit in between. A stale one
        (recreate mode) waits until the dataset was deleted and created again."""
        snap = kstore.open_dataset(st, UUID)
        if self.config.recreate_cycles:
            inc = self.observer.note_base(op.tag, snap.version)
            if op.stale and inc is not None:
                obs, sched = self.observer, self.sched
                st.wait("stale-wait", lambda: obs.incarnations > inc or "d" not in sched.alive)
        opts = kstore.CommitOptions(txn=op.tag)
        x = x_name(snap.schema().names)
        if op.kind == "rename":
            self.stats.renames += 1
            return kstore.rename_columns(st, UUID, {x: "x" if x == "y" else "y"}, txn=op.tag)
        if op.kind == "widen":
            self.stats.widens += 1
            return snap.append(frame(op.rows, x).astype({"rid": "float64"}), schema_mode="merge", options=opts)
        if op.kind == "append":
            return snap.append(frame(op.rows, x), options=opts)
        if op.kind == "overwrite":
            return snap.overwrite_partitions(frame(op.rows, x), options=opts)
        if op.kind == "delete_scope":
            return snap.delete_partitions([{"p": op.partition}], options=opts)
        if op.kind == "delete_rows":
            return snap.delete_rows([[(x, "==", op.x)]], options=opts)
        if op.kind == "compact":
            return snap.compact(options=opts)
        if op.kind == "merge":
            self.stats.row_changes += 1
            return snap.merge(frame(op.rows, x), "rid", options=opts)
        if op.kind == "update":
            self.stats.row_changes += 1
            return snap.update_rows([[(x, "==", op.x)]], _update_values(op, x), options=opts)
        if op.kind == "drop_indices":
            return snap.drop_indices([x], options=opts)
        assert op.kind == "build_indices", op
        return snap.build_indices([x], options=opts)

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
        started = self.sched.stats.steps
        try:
            meta = self._run_op(st, op)
        except Killed:
            return Outcome(op, "killed")
        except CommitStateUnknownError as exc:
            return Outcome(op, "acked" if exc.committed else "unknown", exc.version, repr(exc))
        except KstoreError as exc:
            self._no_corrupt(f"{st.actor} {op.kind} {op.tag}", exc)
            # it raised: it must not have committed (the observer scans the store right now,
            # while this actor is the only one running)
            self.observer.check()
            committed = [v for v, t in self.observer.tags.items() if t == op.tag]
            if committed:
                self.errors.append(f"{st.actor} {op.kind} {op.tag} raised {type(exc).__name__}: {exc} "
                                   f"after it was committed as version {committed[0]}")
            if self.config.clock_skew:
                self._check_cutoff_refusal(st.actor, op, exc, started)
            return Outcome(op, "failed", None, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # invariant 4: every error is a KstoreError
            self.errors.append(f"{st.actor} {op.kind}: raw {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            return Outcome(op, "failed", None, repr(exc))
        # a txn already committed returns that state: the op's version is the one with its tag
        return Outcome(op, "acked", meta.version)

    def _check_cutoff_refusal(self, actor: str, op: Op, exc: KstoreError, started: int) -> None:
        """A write refused for a GC's orphan cutoff needs a fence committed after it started
        (its files were written after it started; a GC lists its candidates before its fence,
        so an older fence's GC cannot have deleted them). With synchronized clocks that always
        holds; a GC whose clock runs ahead sets a cutoff in the future (a false refusal)."""
        if not (isinstance(exc, CommitConflictError) and "garbage collection" in str(exc)):
            return
        obs = self.observer
        fences = [v for v, step in obs.seen_at.items() if obs.fence_ops.get(v) and step > started]
        if not fences:
            older = sorted((v for v in obs.seen_at if obs.fence_ops.get(v)), reverse=True)[:2]
            self.errors.append(f"{self._who(actor)} {op.kind} {op.tag} (started at step {started}) was refused for an "
                               f"orphan cutoff although no fence was committed after it started (newest fences: "
                               + ", ".join(f"version {v}: {obs.about(v)}" for v in older) + f"): {exc}")

    def _who(self, actor: str) -> str:
        return self.observer._who(actor)

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
                    kstore.garbage_collect(st, UUID, retention=retention, enforce_retention_duration=False,
                                           log_retention=self.log_retention)
            except Killed:
                return
            except KstoreError as exc:
                self._no_corrupt(f"{name} {'delete_dataset' if delete else 'garbage_collect'}", exc)
                continue
            except Exception as exc:
                self.errors.append(f"{name} gc: raw {type(exc).__name__}: {exc}\n{traceback.format_exc()}")

    def _no_corrupt(self, who: str, exc: KstoreError) -> None:
        """With damaged derived files (and intact log entries), CorruptMetadataError is a violation."""
        if self.config.damage_rate and isinstance(exc, CorruptMetadataError):
            self.errors.append(f"{who} raised {exc!r} although every log entry is intact"
                               f"{self.sched.damage_note() or ' (no derived file is damaged now)'}")

    def _recreator(self, name: str, creates: list[Op]) -> None:
        """Delete the dataset and create it again, once writers hold snapshots of it."""
        st = SimStore(self.raw, self.sched, name, self.observer)
        writers = [f"w{w}" for w in range(self.config.writers)]
        sched = self.sched
        for op in creates:
            st.wait("await-stale", lambda: any(why == "stale-wait" for why, _ in sched.blocked.values())
                    or not any(w in sched.alive for w in writers))
            for _ in range(3):
                try:
                    kstore.delete_dataset(st, UUID)
                    break
                except Killed:
                    return
                except DatasetNotFoundError:
                    break
                except KstoreError as exc:
                    self._no_corrupt(f"{name} delete_dataset", exc)
                except Exception as exc:
                    self.errors.append(f"{name} delete: raw {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
                    return
            outcome = None
            for _ in range(3):
                outcome = self._attempt(st, op)
                if outcome.result in ("acked", "killed", "unknown"):
                    break
            assert outcome is not None
            self.outcomes.append(outcome)
            if outcome.result == "killed":
                return

    def _reader(self, name: str) -> None:
        st = SimStore(self.raw, self.sched, name, self.observer)
        for _ in range(self.config.reads):
            predicate = self.rng.choice([None, ("x", "==", self.rng.randrange(6)), ("p", "==", "p1")])
            if self.config.rename_rate and predicate is not None and predicate[0] == "x":
                predicate = None  # (x may be named y in the version read; the observer checks x per version)
            version = None
            if self.rng.random() < 0.3:
                known = sorted(v for v, s in self.observer.snapshots.items() if s is not None)
                version = self.rng.choice(known) if known else None
            newest_at_start = max(self.observer.snapshots, default=None)
            # half the reads through the Arrow table, half into pandas (the bounded-memory
            # path when no row is filtered: one scan or file by file into numpy columns)
            as_frame = self.rng.random() < 0.5

            def read(plan: Any, meta: Any, st: Any = st, as_frame: bool = as_frame) -> tuple[Any, Any]:
                if as_frame:
                    df = read_frame(st, plan, None, planned_rows(meta, plan))
                    rids = df["rid"].tolist()
                    return plan, (frozenset(zip(rids, df["p"].tolist(), df[x_name(df.columns)].tolist())), rids)
                table = read_plan(st, plan)
                return plan, (rows_of(table), table.column("rid").to_pylist())

            try:
                plan, (rows, rids) = _plan_and_read(st, UUID, [[predicate]] if predicate else None, None, version,
                                                    None, None, read)
            except Killed:
                return
            except StoreError:
                continue  # an injected fault
            except (VersionNotFoundError, DatasetNotFoundError) as exc:
                self.observer.check()
                self._check_read_error(version, exc, newest_at_start)
                continue
            except Exception as exc:  # a read of a committed version must not fail otherwise
                self.errors.append(f"{name} read of version {version}: {type(exc).__name__}: {exc}"
                                   f"{self.sched.damage_note()}\n{traceback.format_exc()}")
                continue
            self.observer.check_read(plan.version, rows, predicate, rids)
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
        if any(v > version and s is None for v, s in self.observer.snapshots.items()):
            return  # a delete after it expires every version before it (its entries go one by one)
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
        # half the schedules: value-sorted index blocks (FORMAT.md E.7) of two pairs each for
        # every checkpoint, so that reads of x plan through them (and faults and GC meet them)
        blocks = {"BLOCK_ROWS": 2, "MIN_ENTRIES": 1, "MAX_SHARE": 1.0, "MAX_UNKNOWN_SHARE": 1.0}
        saved_blocks = {k: getattr(sorted_index, k) for k in blocks}
        if random.Random(self.seed ^ 0xB10C).random() < 0.5:
            for k, v in blocks.items():
                setattr(sorted_index, k, v)
        try:
            return self._run()
        finally:
            commit_block.CHECKPOINT_INTERVAL = saved
            for k, v in saved_blocks.items():
                setattr(sorted_index, k, v)

    def _run(self) -> Stats:
        with runtime.installed(self.clock):
            if not self.config.create_concurrently:
                init = Op("create", ("init", 1), rows=self._rows(4))
                self.settled_rids = self.next_rid
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
            if self.config.recreate_cycles:
                creates = []
                for k in range(self.config.recreate_cycles):
                    op = Op("create", ("d", k + 1), rows=self._rows(3))
                    self.observer.ops[op.tag] = op
                    creates.append(op)
                actors["d"] = lambda: self._recreator("d", creates)
            if self.clock.offsets:
                self.sched.trace.append("clock offsets: " + ", ".join(
                    f"{a} {offset_text(o)}" for a, o in sorted(self.clock.offsets.items())))
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
                self.sched.stop()
            for t in threads:
                t.join(10)
            self.observer.check()
            self._check_outcomes()
            try:
                self._final_gc()
            except KstoreError as exc:
                self.observer.fail(f"the final garbage collection or read failed: {exc!r}{self.sched.damage_note()}")
        self.stats.versions = len(self.observer.commit_ids)
        for o in self.outcomes:
            self.stats.outcomes[o.result] += 1
        return self.stats

    def _actor_main(self, name: str, body: Callable[[], None]) -> None:
        self.clock.bind(name)
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
            first = self.errors[0].split("\n", 1)[0]
            obs.fail(f"{len(self.errors)} actor error(s) outside the KstoreError tree or against an invariant; "
                     f"the first: {first}\n" + "\n".join(self.errors))
        by_tag: dict[tuple[str, int], list[int]] = {}
        for v, tag in obs.tags.items():
            if tag is not None and obs.snapshots.get(v) is not None:
                by_tag.setdefault(tag, []).append(v)
        for o in self.outcomes:
            found = by_tag.get(o.op.tag, [])
            if len(found) > 1:
                obs.fail(f"{o.op.tag} {o.op.kind} ({o.result}{': ' + o.error if o.error else ''}) was committed "
                         f"{len(found)} times: " + "; ".join(f"version {v}: {obs.about(v)}" for v in found))
            if o.result == "acked":
                # (a restore of version 0 when that was the newest commits nothing)
                if not found and not _noop(o.op, obs) and not (o.op.kind == "restore" and o.version == 0):
                    obs.fail(f"{o.op.tag} {o.op.kind} returned version {o.version} but no version carries it"
                             + (f" (version {o.version}: {obs.about(o.version)})" if o.version is not None else ""))
                if found and o.version is not None and o.version < found[0]:
                    obs.fail(f"{o.op.tag} returned version {o.version}, committed as {found[0]}")
            if o.result == "failed" and found:
                obs.fail(f"{o.op.tag} {o.op.kind} raised ({o.error}) but was committed as version {found[0]} "
                         f"({obs.about(found[0])})")

    def _final_gc(self) -> None:
        """Quiet store: after a last GC, no orphan older than its retention is left."""
        obs = self.observer
        newest = max((v for v, s in obs.snapshots.items() if s is not None), default=None)
        # (files an actor with a clock ahead wrote are born that much later)
        ahead = max([0.0, *self.clock.offsets.values()])
        self.clock.advance((LOG_MIN_AGE + timedelta(days=8)).total_seconds() + ahead)
        try:
            kstore.garbage_collect(self.raw, UUID, log_retention=self.log_retention)
        except KstoreError as exc:
            if newest is not None and load.load_head(self.raw, UUID).meta is not None:
                obs.fail(f"the final GC failed: {exc!r}{self.sched.damage_note()}")
            return
        obs.dirty_log = True
        obs.check()
        head = load.load_head(self.raw, UUID)
        referenced: set[str] = set()
        for v in obs.retained:
            referenced |= obs.refs[v]
        try:
            main, _ = load.load_main(self.raw, UUID)
        except CorruptMetadataError as exc:
            if not any(self.sched.damaged_now(naming.metadata_key(UUID, f)) for f in naming.METADATA_FORMATS):
                obs.fail(f"after the final GC the main file does not parse: {exc!r}")
            main = None
        if main is not None:
            referenced |= main.referenced_keys()
        for key in sorted(self.raw.iter_prefix(naming.dataset_prefix(UUID))):
            if "/_kstore/log/" in key or key.endswith("/" + naming.COMMON_METADATA):
                continue
            if key not in referenced:
                obs.fail(f"after the final GC an orphan is left: {key}")
        if head.meta is not None:
            try:
                table = kstore.read_table(self.raw, UUID)
            except KstoreError as exc:
                obs.fail(f"the final read of version {head.version} fails: {exc!r}{self.sched.damage_note()}")
            rows = rows_of(table)
            if rows != obs.snapshots[head.version]:
                obs.fail("the final read differs from the newest version's snapshot")
        else:
            try:
                kstore.read_table(self.raw, UUID)
            except KstoreError:
                pass
            else:
                obs.fail("the dataset reads although its newest version has no dataset")


def _update_values(op: Op, x: str = "x") -> dict[str, Any]:
    """What an ``update`` op sets: x (under its name ``x``) to (x + 1) % 6 and, if it names
    one, p (as Op.apply)."""
    values: dict[str, Any] = {x: (op.x + 1) % 6 if op.x is not None else None}
    if op.partition is not None:
        values["p"] = op.partition
    return values


def _noop(op: Op, obs: Observer) -> bool:
    """Operations that may legitimately commit nothing (a delete that matched no row)."""
    return op.kind in ("delete_scope", "delete_rows", "compact", "update")
