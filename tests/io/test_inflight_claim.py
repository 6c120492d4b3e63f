"""Issue #29 item 1: an in-flight claim must not be taken for a lost one.

While a conditional PUT of a key is still being processed, S3 answers other conditional PUTs
of that key with ``409 ConditionalRequestConflict``, and the request in flight can be the
writer's own first attempt (its connection dropped; kstore retried). Such an
answer, with a read-back that finds nothing yet, says nothing about who will own the
version: a commit that takes it for a lost claim commits again at the next version when the
first attempt lands (an append committed twice), or reports a conflict and deletes the files
of a version that is committed after all (an unreadable newest version).

The fault proxy (tests/fault_proxy.py) in front of the moto server makes this happen at
will: it holds the first conditional PUT of a log entry (drops the client's connection,
forwards the request :data:`HOLD` seconds later) and answers 409 to every other conditional
PUT of that key while it holds it. Both ways to open the bucket run every test:
:class:`~kstore.io.s3.S3Store` (what ``s3://`` URLs open) and
:class:`~kstore.io.objstore.ObjectStore` with obstore's options; since #30 both are the one
obstore client.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

import kstore
from kstore.errors import CommitStateUnknownError, KstoreError
from kstore.io.objstore import ObjectStore
from kstore.io.s3 import S3Store
from tests.fault_proxy import FaultProxy, is_log_entry_path
from tests.io.conftest import moto_obstore_options

#: Seconds the proxy holds the first attempt at least: longer than the store's first retry
#: backoff, so that the retry meets the held request.
HOLD = 2.0
#: The hold lasts until the writer gave up on the held request by itself, however slow the
#: machine: the store (S3Store is an ObjectStore: one client) retried once (409: "exists"),
#: read the key back, and the commit read it back.
OWN_RETRIES = {"s3store": 1, "obstore": 1}
OWN_READS = {"s3store": 2, "obstore": 2}

BACKENDS = ["s3store", "obstore"]

pytestmark = pytest.mark.timeout(90)


def proxied_store(kind: str, proxy: FaultProxy, bucket: str, agent: str | None = None) -> Any:
    """A new store (with its own client, as another process would have) on ``bucket``,
    talking to the moto server through ``proxy``; ``agent`` is added to its User-Agent."""
    assert proxy.endpoint is not None
    if kind == "s3store":
        return S3Store(bucket, endpoint_url=proxy.endpoint, client_options={"user_agent": agent} if agent else None)
    options = moto_obstore_options(proxy.endpoint)
    return ObjectStore(f"s3://{bucket}", {**options, "user_agent": agent} if agent else options)


def rows(store: Any, dataset: str = "ds") -> list[tuple[Any, ...]]:
    frame = kstore.read_dataset(store, dataset)
    return sorted(map(tuple, frame[sorted(frame.columns)].itertuples(index=False, name=None)))


def frame_rows(*frames: pd.DataFrame) -> list[tuple[Any, ...]]:
    frame = pd.concat(frames, ignore_index=True)
    return sorted(map(tuple, frame[sorted(frame.columns)].itertuples(index=False, name=None)))


def gave_up_on_held(kind: str, agent: str = "") -> Callable[[FaultProxy], bool]:
    """An ``until`` of the hold: the writer (whose User-Agent holds ``agent``) sent the held
    request again as often as its store does by itself, and read the key back while it was
    held (finding nothing): where a commit must not take the claim for lost."""
    def until(proxy: FaultProxy) -> bool:
        held = [e.body for e in proxy.events if e.action == "hold"]
        mine = [e for e in proxy.events if agent in e.agent]
        retries = sum(e.action == "conflict" and e.body in held for e in mine)
        reads = sum(e.method == "GET" and e.held and e.status == 404 for e in mine)
        return retries >= OWN_RETRIES[kind] and reads >= OWN_READS[kind]
    return until


def hold_first_claim(proxy: FaultProxy, kind: str) -> None:
    proxy.hold_conditional_puts(match=is_log_entry_path, hold_seconds=HOLD, count=1, until=gave_up_on_held(kind))


def assert_hold_met(proxy: FaultProxy) -> None:
    """The scenario happened: one log entry PUT was held, landed, and a retry met it (409)."""
    assert proxy.wait_idle(30), "the held request did not land"
    counts = proxy.counters()
    assert counts["held"] == 1 and proxy.held_statuses() == [200], (counts, proxy.held_statuses())
    assert counts["conflicts"] >= 1, f"no conditional PUT met the held one: {counts}"


def operations(store: Any) -> list[str]:
    return [h.operation for h in kstore.history(store, "ds")]


@pytest.mark.parametrize("kind", BACKENDS)
def test_append_acknowledged_once_is_committed_once(kind: str, fault_proxy: FaultProxy, s3_bucket: str) -> None:
    store = proxied_store(kind, fault_proxy, s3_bucket)
    first = pd.DataFrame({"k": [1, 2], "v": ["a", "b"]})
    added = pd.DataFrame({"k": [3, 4], "v": ["c", "d"]})
    kstore.store_dataset(store, "ds", first)
    hold_first_claim(fault_proxy, kind)

    meta = kstore.update_dataset(store, "ds", added)

    assert_hold_met(fault_proxy)
    ops = operations(store)
    assert ops == ["create", "append"], (
        f"the append was acknowledged once (as version {meta.version}) but committed {ops.count('append')} "
        f"times: history {ops}, rows read back {rows(store)}")
    assert meta.version == 1
    assert rows(store) == frame_rows(first, added)


@pytest.mark.parametrize("kind", BACKENDS)
def test_overwrite_meeting_its_own_held_claim_keeps_the_newest_version_readable(
        kind: str, fault_proxy: FaultProxy, s3_bucket: str) -> None:
    store = proxied_store(kind, fault_proxy, s3_bucket)
    base = pd.DataFrame({"p": [1, 1, 2, 2], "x": [1, 2, 3, 4]})
    new = pd.DataFrame({"p": [2, 2, 2], "x": [30, 40, 50]})
    kstore.store_dataset(store, "ds", base, partition_on="p")
    kstore.update_dataset(store, "ds", pd.DataFrame({"p": [3], "x": [5]}))
    hold_first_claim(fault_proxy, kind)

    raised: KstoreError | None = None
    try:
        meta = kstore.update_dataset(store, "ds", new, mode="overwrite_partitions")
    except KstoreError as exc:
        raised = exc

    assert_hold_met(fault_proxy)
    expected = frame_rows(pd.DataFrame({"p": [1, 1, 3], "x": [1, 2, 5]}), new)
    problems = []
    if raised is not None and not isinstance(raised, CommitStateUnknownError):
        problems.append(f"the overwrite raised {type(raised).__name__}: {raised}")
    if raised is None and meta.version != 2:
        problems.append(f"the overwrite was acknowledged as version {meta.version}, not 2")
    try:
        got = rows(store)
    except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
        problems.append(f"the newest version cannot be read: {type(exc).__name__}: {exc}")
    else:
        if got != expected:
            problems.append(f"the newest version holds {got}, expected {expected}")
    ops = operations(store)
    if ops != ["create", "append", "overwrite_partitions"]:
        problems.append(f"history {ops}")
    assert not problems, "; ".join(problems)


def writes_rows(count: int) -> Callable[[bytes], bool]:
    """Whether a log entry's bytes are those of a commit that adds ``count`` rows."""
    def check(body: bytes) -> bool:
        try:
            return bool(json.loads(body).get("rows_added") == count)
        except ValueError:
            return False
    return check


@pytest.mark.parametrize("kind", BACKENDS)
def test_two_writers_meeting_a_held_claim_both_commit_once(kind: str, fault_proxy: FaultProxy,
                                                           s3_bucket: str) -> None:
    first = pd.DataFrame({"k": [0], "w": ["base"]})
    data = {"a": pd.DataFrame({"k": [1, 2], "w": ["a", "a"]}), "b": pd.DataFrame({"k": [3, 4, 5], "w": ["b"] * 3})}
    kstore.store_dataset(proxied_store(kind, fault_proxy, s3_bucket), "ds", first)
    # two writers, two clients
    stores = {name: proxied_store(kind, fault_proxy, s3_bucket, agent=f"kstore-writer-{name}") for name in data}
    is_b = writes_rows(3)
    a_gave_up = gave_up_on_held(kind, agent="kstore-writer-a")
    # A's first claim is held until A gave up on it by itself and B's claim of the same
    # version met it (409)
    fault_proxy.hold_conditional_puts(
        match=is_log_entry_path, hold_seconds=HOLD, count=1,
        until=lambda proxy: a_gave_up(proxy) and any(map(is_b, proxy.conflict_bodies())))
    results: dict[str, Any] = {}

    def write(name: str) -> None:
        try:
            results[name] = kstore.update_dataset(stores[name], "ds", data[name])
        except BaseException as exc:  # noqa: BLE001 - reported below
            results[name] = exc

    writers = {name: threading.Thread(target=write, args=(name,), name=f"writer-{name}") for name in data}
    writers["a"].start()
    try:
        assert fault_proxy.wait_held(1, timeout=30), "writer A's claim was never held"
        writers["b"].start()
    finally:
        for thread in writers.values():
            if thread.ident is not None:
                thread.join(60)
    assert not any(t.is_alive() for t in writers.values())

    assert_hold_met(fault_proxy)
    assert any(map(is_b, fault_proxy.conflict_bodies())), f"writer B never met A's held claim: {fault_proxy.counters()}"
    errors = {name: repr(r) for name, r in results.items() if isinstance(r, BaseException)}
    store = proxied_store(kind, fault_proxy, s3_bucket)
    ops = operations(store)
    assert not errors and ops == ["create", "append", "append"], (
        f"errors {errors}; history {ops}; rows {rows(store)}")
    assert sorted(results[name].version for name in data) == [1, 2]
    assert rows(store) == frame_rows(first, *data.values())
