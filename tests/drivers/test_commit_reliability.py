"""Reliability of the one commit (kstore/blocks/commit.py) on real local-directory stores.

Writers run as separate processes (``tests/drivers/_crash_writer.py``, started with
``subprocess``): concurrent appends, conflicting deletes and overwrites, index builds
racing appends, writers killed with SIGKILL at every step of the commit protocol, and
readers looping while writers commit. Nothing here uses S3.

Figures (wall time, commits/s, lost races) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

import kstore
from kstore.blocks import load
from kstore.core import naming
from kstore.errors import CommitConflictError, DatasetNotFoundError, VersionNotFoundError
from tests.drivers._stores import HookStore

HELPER = Path(__file__).with_name("_crash_writer.py")
UUID = "ds"
WAIT = 120.0  # upper bound for any wait on a subprocess (never reached when things work)


def _helper_module():
    """Load ``_crash_writer.py`` (for its frame builders) under a unique module name."""
    name = "kstore_tests_crash_writer"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HELPER)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


cw = _helper_module()

# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def local_store(tmp_path: Path) -> tuple[str, Path]:
    root = tmp_path / "store"
    root.mkdir(parents=True)
    return "file://" + str(root), root


def spawn(spec: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(HELPER), json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = WAIT) -> tuple[int, dict | None, str]:
    """Return code, the JSON result (None when the process died) and stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"writer subprocess hung (killed after {timeout}s): {err[-3000:]}")
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else None), err


def run_writer(spec: dict, timeout: float = WAIT) -> tuple[int, dict | None, str]:
    return finish(spawn(spec), timeout)


def ok_result(proc_result: tuple[int, dict | None, str]) -> dict:
    rc, res, err = proc_result
    assert rc == 0 and res is not None, f"writer failed (rc={rc}): {err[-3000:]}"
    return res


def wait_files(paths: list[Path], procs: list[subprocess.Popen], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not all(p.exists() for p in paths):
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            _, err = dead[0].communicate()
            pytest.fail(f"a writer exited before {what}: {err[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def p_of(label: str) -> str:
    return naming.parse_label(label, ["p"])[0][0]


def ids_of(url: str, **kw) -> list:
    return sorted(kstore.read_dataset(url, UUID, columns=["id"], **kw)["id"].tolist())


def dataset_keys(root_url: str) -> set[str]:
    st = kstore.open_store(root_url)
    keys = set(st.iter_prefix(UUID + "/"))
    keys |= {k for k in (naming.metadata_key(UUID, f) for f in naming.METADATA_FORMATS) if st.exists(k)}
    return keys


def log_versions(url: str) -> list[int]:
    return [e.version for e in kstore.history(url, UUID)]


def main_version(url: str) -> int:
    """The version the main metadata file (what kartothek reads) shows."""
    return load.load_main(kstore.open_store(url), UUID)[0].version


def frame(p: list[str], ids: list[int], x: list[int] | None = None) -> pd.DataFrame:
    return pd.DataFrame({"p": p, "id": ids, "x": x if x is not None else [i % 7 for i in ids],
                         "v": [float(i) for i in ids]})


# ---------------------------------------------------------------------------------------
# 1 + 4. 8 processes x 25 appends to one dataset, with a reader looping meanwhile
# ---------------------------------------------------------------------------------------

W, N, ROWS = 8, 25, 2
INIT = {"init_a": [-1, -2], "init_b": [-3]}


@functools.cache
def expected_ids(p: str) -> frozenset[int]:
    if p in INIT:
        return frozenset(INIT[p])
    w, j = p[1:].split("_")
    return frozenset(cw.append_frame(int(w), int(j), ROWS)["id"])


class Reader(threading.Thread):
    """Read the current version in a loop; record (partition values, ids) of every read."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.seen: list[tuple[frozenset, tuple]] = []
        self.main_versions: list[int] = []
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.main_versions.append(main_version(self.url))
                df = kstore.read_dataset(self.url, UUID, columns=["p", "id"])
                self.seen.append((frozenset(df["p"]), tuple(df["id"])))
            except Exception as exc:  # any error is a finding: the reader saw a broken state
                self.errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.02)

    def check(self, version_psets: set[frozenset]) -> None:
        assert not self.errors, f"reader errors: {self.errors[:3]}"
        assert self.seen, "the reader never completed a read"
        for pset, ids in self.seen:
            assert pset in version_psets, f"reader saw partitions {sorted(pset)} = no committed version"
            want = set().union(*(expected_ids(p) for p in pset))
            assert len(ids) == len(want) and set(ids) == want, "reader saw a partial or duplicated partition"

    @property
    def regressions(self) -> int:
        v = self.main_versions
        return sum(b < a for a, b in zip(v, v[1:]))


def version_psets(url: str) -> set[frozenset]:
    st = kstore.open_store(url)
    return {frozenset(p_of(lab) for lab in load.load_version(st, UUID, v).partitions) for v in log_versions(url)}


def init_dataset(url: str, secondary_indices=("wr", "x")) -> None:
    rows = [(p, i) for p, ids in INIT.items() for i in ids]
    df = pd.DataFrame({"p": [p for p, _ in rows], "id": [i for _, i in rows], "wr": ["init"] * len(rows),
                       "x": [-1] * len(rows), "v": [0.0] * len(rows)})
    kstore.store_dataset(url, UUID, df, partition_on="p", secondary_indices=list(secondary_indices))


def start_writers(tmp_path: Path, specs: list[dict]) -> tuple[list[subprocess.Popen], Path]:
    """Spawn writers, wait until all imported kstore and wait for the start flag."""
    flag = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(len(specs))]
    procs = [spawn(dict(s, ready_file=str(r), start_flag=str(flag))) for s, r in zip(specs, ready)]
    wait_files(ready, procs, "all writers are ready")
    return procs, flag


@pytest.mark.slow
def test_concurrent_appends_8_processes_x_25(tmp_path):
    url, _ = local_store(tmp_path)
    init_dataset(url)
    specs = [{"url": url, "uuid": UUID, "op": "appends", "writer": w, "n": N, "rows": ROWS} for w in range(W)]
    procs, flag = start_writers(tmp_path, specs)
    reader = Reader(url)
    reader.start()
    flag.touch()
    try:
        results = [ok_result(finish(p)) for p in procs]
    finally:
        reader.stop.set()
        reader.join(WAIT)

    # -- figures ---------------------------------------------------------------------
    wall = max(r["t_end"] for r in results) - min(r["t_start"] for r in results)
    claims = sum(r["claims"] for r in results)
    lost = sum(r["lost"] for r in results)
    attempts = [a for r in results for a in r["attempts"]]
    latency = sorted(s for r in results for s in r["seconds"])
    print(
        f"\n[8x25 appends] wall {wall:.2f}s, {W * N / wall:.1f} commits/s, log claims {claims}, "
        f"lost races {lost} ({lost / claims:.0%}), attempts per commit: mean {sum(attempts) / len(attempts):.2f} "
        f"max {max(attempts)}, commit latency p50 {latency[len(latency) // 2]:.3f}s max {latency[-1]:.3f}s; "
        f"reader: {len(reader.seen)} reads, main-file version went backwards {reader.regressions}x"
    )

    # -- every append committed exactly once --------------------------------------------
    errors = [e for r in results for e in r["errors"]]
    assert not errors, f"{len(errors)} appends failed, e.g. {errors[:3]}"
    assert claims - lost == W * N
    versions = sorted(v for r in results for v in r["versions"])
    assert versions == list(range(1, W * N + 1))

    hist = kstore.history(url, UUID)
    assert [e.version for e in hist] == list(range(W * N + 1))
    assert [e.operation for e in hist].count("append") == W * N
    assert hist[0].operation == "create"
    assert all(e.parent == e.version - 1 for e in hist[1:])
    assert all(e.n_files == len(INIT) + e.version for e in hist)
    assert sum(e.rows_added for e in hist[1:]) == sum(cw.rows_of(w, j, ROWS) for w in range(W) for j in range(N))

    # -- the main file holds the newest version (no writer published an older one last) --
    st = kstore.open_store(url)
    meta = load.load_metadata(st, UUID)[0]
    assert meta.version == W * N
    assert meta == load.load_version(st, UUID, W * N)

    # -- all partitions, no row lost or duplicated ----------------------------------------
    ps = {f"w{w}_{j:03d}" for w in range(W) for j in range(N)} | set(INIT)
    labels = {p_of(lab): lab for lab in meta.partitions}
    assert set(labels) == ps and len(meta.partitions) == len(ps)
    got = kstore.read_dataset(url, UUID, columns=["p", "id"])
    want = set().union(*(expected_ids(p) for p in ps))
    assert len(got) == len(want) and set(got["id"]) == want
    for p, grp in got.groupby("p"):
        assert set(grp["id"]) == expected_ids(p)

    # -- every secondary index covers every partition --------------------------------------
    schema = load.load_schema(st, meta)
    for col in ("wr", "x"):
        vals, labs = load.load_index(st, meta, col, schema).pairs()
        pairs = set(zip(vals.to_pylist(), labs.to_pylist()))
        want_pairs = {("init" if col == "wr" else -1, labels[p]) for p in INIT}
        for w in range(W):
            for j in range(N):
                want_pairs.add((f"w{w}" if col == "wr" else w * 1000 + j, labels[f"w{w}_{j:03d}"]))
        assert pairs == want_pairs, f"index {col!r} does not cover exactly the committed partitions"
    for w in range(W):
        assert kstore.index_lookup(url, UUID, "wr", f"w{w}") == sorted(labels[f"w{w}_{j:03d}"] for j in range(N))
        for j in range(0, N, 6):
            assert kstore.index_lookup(url, UUID, "x", w * 1000 + j) == [labels[f"w{w}_{j:03d}"]]
    stats = load.load_stats(st, meta)
    assert set(stats.column("label").to_pylist()) == set(meta.partitions)

    # -- 4. the reader only ever saw committed versions --------------------------------------
    reader.check(version_psets(url))


def test_reader_never_sees_a_partial_version_while_writers_append_and_delete(tmp_path):
    """Writers append and delete (row counts go up and down); a reader loops meanwhile."""
    url, _ = local_store(tmp_path)
    init_dataset(url)
    specs = [{"url": url, "uuid": UUID, "op": "churn", "writer": w, "n": 9, "rows": ROWS} for w in range(3)]
    procs, flag = start_writers(tmp_path, specs)
    reader = Reader(url)
    reader.start()
    flag.touch()
    try:
        results = [ok_result(finish(p)) for p in procs]
    finally:
        reader.stop.set()
        reader.join(WAIT)
    assert not [e for r in results for e in r["errors"]]
    n_commits = sum(len(r["versions"]) for r in results)
    assert n_commits == 3 * (9 + 3)
    assert log_versions(url) == list(range(n_commits + 1))
    psets = version_psets(url)
    counts = {sum(len(expected_ids(p)) for p in ps) for ps in psets}
    seen_counts = {len(ids) for _, ids in reader.seen}
    print(f"\n[churn] {n_commits} commits, reader {len(reader.seen)} reads, {len(seen_counts)} distinct row "
          f"counts seen (all among {len(counts)} committed counts), main-file regressions {reader.regressions}")
    assert seen_counts <= counts
    reader.check(psets)
    final = {p_of(lab) for lab in kstore.load_metadata(url, UUID).partitions}
    assert final == set(INIT) | {f"w{w}_{j:03d}" for w in range(3) for j in range(9) if j % 3 != 1}


# ---------------------------------------------------------------------------------------
# 2. conflicting writers
# ---------------------------------------------------------------------------------------


def small_dataset(url: str) -> dict[str, list[str]]:
    """p in a, b, c with two files each (two chunks); returns p -> labels."""
    df = frame(["a", "b", "c"] * 4, list(range(12)))
    meta = kstore.store_dataset(url, UUID, [df.iloc[:6], df.iloc[6:]], partition_on="p", secondary_indices=["x"])
    out: dict[str, list[str]] = {}
    for lab in meta.partitions:
        out.setdefault(p_of(lab), []).append(lab)
    return out


@pytest.mark.parametrize("scopes", [
    pytest.param([["a"], ["a"], ["a"]], id="same-partitions"),
    pytest.param([["a"], ["a", "b"], ["c"]], id="overlapping-and-disjoint"),
])
def test_concurrent_delete_scope_one_wins(tmp_path, scopes):
    """All writers read version 0 and race for version 1 (barrier at the log claim)."""
    url, _ = local_store(tmp_path)
    labels = small_dataset(url)
    bdir = tmp_path / "barrier"
    bdir.mkdir()
    procs = [
        spawn({"url": url, "uuid": UUID, "op": "delete_scope", "scope": [{"p": p} for p in ps],
               "barrier": {"dir": str(bdir), "name": f"w{i}", "count": len(scopes)}})
        for i, ps in enumerate(scopes)
    ]
    results = [ok_result(finish(p)) for p in procs]
    # writers whose scopes overlap: exactly one wins; a disjoint scope commutes and commits
    overlapping = [i for i, ps in enumerate(scopes) if "a" in ps]
    winners = [i for i in overlapping if results[i]["ok"]]
    assert len(winners) == 1, results
    win_version = results[winners[0]]["versions"][0]
    for i, r in enumerate(results):
        if i in overlapping and i not in winners:
            assert r["error"] == "CommitConflictError", r
            # names the version it conflicts with, the version it read and the partitions
            m = re.search(r"version (\d+) \(committed after version 0, which this write read\)", r["message"])
            assert m and int(m.group(1)) >= win_version, r["message"]
            assert any(lab in r["message"] for lab in labels["a"]), r["message"]
            assert r["claims"] >= 1 and r["lost"] == r["claims"]  # lost the race, then a real conflict
        elif i not in overlapping:
            assert r["ok"], r
    removed = {p for i in winners + [i for i in range(len(scopes)) if i not in overlapping] for p in scopes[i]}
    hist = kstore.history(url, UUID)
    assert [e.operation for e in hist] == ["create"] + ["delete_scope"] * (1 + len(scopes) - len(overlapping))
    assert set(kstore.read_dataset(url, UUID, columns=["p", "id"])["p"]) == {"a", "b", "c"} - removed


@pytest.mark.parametrize("order", ["append-first", "overwrite-first", "race"])
def test_overwrite_partitions_vs_append_into_the_same_partition(tmp_path, order):
    """Delta semantics: an overwrite that read version v conflicts with an append into its
    partitions committed after v; an append committed after the overwrite is applied on top
    (a blind append reads nothing, so it commutes)."""
    url, _ = local_store(tmp_path)
    labels = small_dataset(url)
    bdir = tmp_path / "barrier"
    bdir.mkdir()
    barrier = {"dir": str(bdir), "count": 2}
    ow = {"url": url, "uuid": UUID, "op": "overwrite", "data": frame(["a"] * 3, [100, 101, 102]).to_dict("list"),
          "barrier": dict(barrier, name="overwrite")}
    ap = {"url": url, "uuid": UUID, "op": "append", "data": frame(["a"] * 2, [200, 201]).to_dict("list"),
          "barrier": dict(barrier, name="append")}
    if order == "append-first":
        ow["after_version"] = 1
    elif order == "overwrite-first":
        ap["after_version"] = 1
    p_ow, p_ap = spawn(ow), spawn(ap)
    r_ow, r_ap = ok_result(finish(p_ow)), ok_result(finish(p_ap))
    assert r_ap["ok"], r_ap  # an append never conflicts with an overwrite
    untouched = set(range(12)) - {0, 3, 6, 9}
    a_old = {0, 3, 6, 9}
    got = set(ids_of(url))
    if r_ow["ok"]:
        assert order != "append-first"
        # serial order: overwrite (v1), then append (v2)
        assert r_ow["versions"] == [1] and r_ap["versions"] == [2]
        assert got == untouched | {100, 101, 102, 200, 201}
        assert [e.operation for e in kstore.history(url, UUID)] == ["create", "overwrite_partitions", "append"]
    else:
        assert order != "overwrite-first"
        assert r_ow["error"] == "CommitConflictError", r_ow
        app_label = kstore.history(url, UUID)[1].added[0]
        assert "version 1" in r_ow["message"] and app_label in r_ow["message"], r_ow["message"]
        assert got == untouched | a_old | {200, 201}  # the append is not lost
        assert [e.operation for e in kstore.history(url, UUID)] == ["create", "append"]
    final = set(kstore.load_metadata(url, UUID).partitions)
    assert (final & set(labels["a"])) == (set() if r_ow["ok"] else set(labels["a"]))
    assert set(labels["b"]) | set(labels["c"]) <= final


def test_concurrent_appends_and_build_indices(tmp_path):
    """build_indices races two appenders; it loses its first claim (it waits until version 3
    exists), retries, and the committed index covers every partition, including appends
    committed after it."""
    url, _ = local_store(tmp_path)
    init_dataset(url, secondary_indices=["wr"])
    # every writer waits at its first claim until all three are there: the build has read
    # version 0 by then, and waits further until version 3 exists, so its claim of version 1
    # is lost whatever the processes' timing (it was a race the build could win under load)
    bdir = tmp_path / "barrier"
    bdir.mkdir()
    specs = [{"url": url, "uuid": UUID, "op": "appends", "writer": w, "n": 8, "rows": ROWS,
              "barrier": {"dir": str(bdir), "name": f"w{w}", "count": 3}} for w in range(2)]
    specs.append({"url": url, "uuid": UUID, "op": "build_indices", "columns": ["x"], "after_version": 3,
                  "barrier": {"dir": str(bdir), "name": "build", "count": 3}})
    procs, flag = start_writers(tmp_path, specs)
    flag.touch()
    results = [ok_result(finish(p)) for p in procs]
    assert all(r["ok"] for r in results), results
    assert results[2]["lost"] >= 1  # the index build had to retry on top of appends
    hist = kstore.history(url, UUID)
    assert [e.version for e in hist] == list(range(17 + 1))
    assert [e.operation for e in hist].count("build_indices") == 1
    st = kstore.open_store(url)
    for v in [e.version for e in hist if e.version >= results[2]["versions"][0]]:
        meta = load.load_version(st, UUID, v)
        vals, labs = load.load_index(st, meta, "x", load.load_schema(st, meta)).pairs()
        pairs = set(zip(vals.to_pylist(), labs.to_pylist()))
        want = set()
        for lab in meta.partitions:
            p = p_of(lab)
            want.add((-1, lab) if p in INIT else (int(p[1:].split("_")[0]) * 1000 + int(p.split("_")[1]), lab))
        assert pairs == want, f"index of version {v} does not cover its partitions"
    meta = kstore.load_metadata(url, UUID)
    for lab in meta.partitions:
        p = p_of(lab)
        if p not in INIT:
            x = int(p[1:].split("_")[0]) * 1000 + int(p.split("_")[1])
            assert kstore.index_lookup(url, UUID, "x", x) == [lab]


# ---------------------------------------------------------------------------------------
# the main file must end at the newest version (in-process, deterministic interleaving)
# ---------------------------------------------------------------------------------------


def test_publish_never_leaves_the_main_file_behind_a_committed_version(tmp_path):
    """Writer A claims v1. Before A publishes, B commits v2; while A lists the log to re-publish
    the newest version it saw (v2), C commits v3 completely. C returned, so every reader must
    now see v3 (read-your-writes); the main file must not be left at v2 by A's late write."""
    url, _ = local_store(tmp_path)
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    done = []

    def before(method, key):
        if method == "put" and key == naming.metadata_key(UUID) and not done:
            done.append("B")
            kstore.update_dataset(url, UUID, frame(["b"], [1]))  # v2, complete

    def after(method, key, result):
        if method == "iter_prefix" and key == naming.log_prefix(UUID) and done == ["B"]:
            done.append("C")
            kstore.update_dataset(url, UUID, frame(["c"], [2]))  # v3, complete

    a = HookStore(url, before=before, after=after)
    meta = kstore.update_dataset(a, UUID, frame(["d"], [3]))
    assert meta.version == 1 and done == ["B", "C"]
    assert log_versions(url) == [0, 1, 2, 3]
    assert main_version(url) == 3, "a committed version (3) is invisible to readers of the main file"
    assert ids_of(url) == [0, 1, 2, 3]


# ---------------------------------------------------------------------------------------
# 3. crash injection: SIGKILL at every step of the commit protocol
# ---------------------------------------------------------------------------------------

CRASH_APPEND = {"p": ["d", "e", "f", "d"], "id": [100, 101, 102, 103], "x": [9, 9, 8, 7],
                "v": [1.0, 2.0, 3.0, 4.0]}
# name -> (key pattern, n-th matching call, kill before/after the call)
CRASH_POINTS = {
    "before-any-file": (r"^ds/table/", 1, "before"),
    "mid-data-files": (r"^ds/table/", 2, "before"),
    "after-data-files": (r"^ds/indices/", 1, "before"),
    "after-index-file": (r"^ds/_kstore/log/", 1, "before"),
    "after-log-claim": (r"^ds/_kstore/log/", 1, "after"),
    "after-main-file": (r"^ds\.by-dataset-metadata", 1, "after"),
}
RANDOM_SEEDS = [0, 1, 2, 3, 4]


def crash_base(url: str) -> dict[int, set[int]]:
    """Versions 0 (p=a, b) and 1 (+ p=c); returns the row ids of each version."""
    kstore.store_dataset(url, UUID, frame(["a", "b", "a"], [0, 1, 2]), partition_on="p", secondary_indices=["x"])
    kstore.update_dataset(url, UUID, frame(["c", "c"], [3, 4]))
    return {0: {0, 1, 2}, 1: {0, 1, 2, 3, 4}}


def append_call_sequence(tmp_path: Path) -> list[tuple[str, str]]:
    """The put / put_if_absent calls of the crashing append, recorded on a scratch store."""
    url, _ = local_store(tmp_path / "scratch")
    crash_base(url)
    rec = HookStore(url)
    kstore.update_dataset(rec, UUID, pd.DataFrame(CRASH_APPEND))
    return [(m, k) for m, k in rec.calls if m in ("put", "put_if_absent")]


def referenced_by_any_version(url: str) -> set[str]:
    st = kstore.open_store(url)
    keys = set()
    for v in log_versions(url):
        keys |= load.load_version(st, UUID, v).referenced_keys()
    return keys


def checkpoint_versions(keys: set[str]) -> set[int]:
    return {v for v in (naming.version_from_checkpoint_key(UUID, k) for k in keys) if v is not None}


def without_checkpoints(keys: set[str]) -> set[str]:
    """``keys`` less format 2's derived log files: checkpoints, the ``_last_checkpoint``
    hint and history summaries."""
    return {k for k in keys if naming.version_from_checkpoint_key(UUID, k) is None
            and naming.version_from_summary_key(UUID, k) is None and k != naming.last_checkpoint_key(UUID)}


def markers(versions) -> set[str]:
    """The expired markers GC writes before it tombstones ``versions``."""
    return {naming.expired_key(UUID, v) for v in versions}


def check_all_versions_read(url: str, model: dict[int, set[int]]) -> None:
    for v in log_versions(url):
        assert set(ids_of(url, version=v)) == model[v], f"version {v} reads differently"


@pytest.mark.parametrize("point", list(CRASH_POINTS) + [f"random-{s}" for s in RANDOM_SEEDS])
def test_crashed_append_leaves_a_consistent_dataset(tmp_path, point):
    url, root = local_store(tmp_path)
    sequence = append_call_sequence(tmp_path)
    kinds = [k.split("/")[1] if "/" in k else "main" for _, k in sequence]
    # the protocol order: data files, (kartothek's) index file, log claim, main file; format 2
    # keeps statistics and index values in the log entry (no statistics file)
    assert kinds == ["table"] * 3 + ["indices", "_kstore", "main"], sequence
    claim_at = next(i for i, (m, k) in enumerate(sequence) if "/_kstore/log/" in k) + 1
    if point.startswith("random-"):
        rng = random.Random(int(point.split("-")[1]))
        n, when = rng.randint(1, len(sequence)), rng.choice(["before", "after"])
        pattern = "."
        will_commit = n > claim_at or (n == claim_at and when == "after")
        main_published = n == len(sequence) and when == "after"
    else:
        pattern, n, when = CRASH_POINTS[point]
        will_commit = point in ("after-log-claim", "after-main-file")
        main_published = point == "after-main-file"

    model = crash_base(url)
    before_keys = dataset_keys(url)
    rc, res, err = run_writer({"url": url, "uuid": UUID, "op": "append", "data": CRASH_APPEND,
                               "hook": {"pattern": pattern, "n": n, "when": when}})
    assert rc == -signal.SIGKILL, f"the writer was not killed at {point} (rc={rc}, {res}): {err[-2000:]}"
    committed = store_has_version(url, 2)
    assert committed == will_commit
    if committed:
        model[2] = model[1] | set(CRASH_APPEND["id"])

    # every committed version still reads, the current read is a whole committed version
    assert log_versions(url) == sorted(model)
    check_all_versions_read(url, model)
    assert main_version(url) == (2 if main_published else 1)  # a claimed, unpublished version lags there
    assert set(ids_of(url)) == model[max(model)]  # readers follow the log: a claimed version is committed

    # what the dead writer left behind
    new_keys = dataset_keys(url) - before_keys
    orphans = new_keys - referenced_by_any_version(url) - {naming.log_key(UUID, v) for v in model}
    if committed:
        assert not orphans
    else:
        assert all(k.startswith(UUID + "/") for k in orphans) and len(orphans) == len(new_keys)

    # the next writer follows the log (picks up a claimed-but-unpublished version) and repairs the main file
    meta = kstore.update_dataset(url, UUID, frame(["g"], [500]))
    nxt = max(model) + 1
    assert meta.version == nxt
    model[nxt] = model[nxt - 1] | {500}
    assert main_version(url) == nxt
    assert log_versions(url) == list(range(nxt + 1))
    check_all_versions_read(url, model)
    assert set(ids_of(url)) == model[nxt]  # no committed row lost
    if committed:
        assert {p_of(lab) for lab in meta.partitions} >= {"d", "e", "f"}

    # GC with retention 0 removes the debris; everything the newest version references stays.
    # It commits its fence (nxt + 1) first; expired versions younger than an hour keep a
    # tombstone (their number stays taken).
    gc = kstore.garbage_collect(url, UUID, retention=pd.Timedelta(0).to_pytimedelta(), enforce_retention_duration=False)
    assert set(gc.deleted_files) >= orphans
    assert gc.fence_version == nxt + 1
    assert gc.retained_versions == (nxt, nxt + 1) and set(gc.expired_versions) == set(range(nxt))
    after = dataset_keys(url)
    assert not (orphans & after)
    assert checkpoint_versions(after) <= set(gc.retained_versions) | {0}
    after = without_checkpoints(after)
    newest = load.load_version(kstore.open_store(url), UUID, nxt + 1)
    assert newest.referenced_keys() == load.load_version(kstore.open_store(url), UUID, nxt).referenced_keys()
    assert after == newest.referenced_keys() | {naming.log_key(UUID, v) for v in range(nxt + 2)} | {
        naming.metadata_key(UUID), naming.common_metadata_key(UUID)} | markers(range(nxt))
    assert all(load.load_entry(kstore.open_store(url), UUID, v).expired for v in range(nxt))
    assert set(ids_of(url)) == model[nxt]
    with pytest.raises(VersionNotFoundError):
        kstore.read_dataset(url, UUID, version=0)
    assert [k for k in kstore.open_store(url).iter_prefix("") if not k.startswith(UUID)] == []


@pytest.mark.parametrize("seed", range(6))
def test_crashed_writer_on_s3_leaves_a_consistent_dataset(s3_endpoint, seed):
    """SIGKILL at a random put / put_if_absent / delete of an append, an overwrite or a GC
    against S3 (moto): every retained version reads, no committed row is lost, the next
    writer continues, and GC removes the debris."""
    import uuid

    import boto3

    bucket = f"kstore-crash-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/root?endpoint_url={s3_endpoint}"
    rng = random.Random(seed)
    model = crash_base(url)
    op = ["append", "overwrite", "gc"][seed % 3]
    spec = {"url": url, "uuid": UUID, "op": op, "retention": 0,
            "hook": {"pattern": ".", "n": rng.randint(1, 6), "when": rng.choice(["before", "after"]),
                     "deletes": op == "gc" and rng.random() < 0.5}}
    if op == "append":
        spec["data"] = CRASH_APPEND
        new = model[1] | set(CRASH_APPEND["id"])
    elif op == "overwrite":
        spec["data"] = frame(["a"], [900]).to_dict("list")
        new = {3, 4, 1, 900}
    else:
        new = model[1]  # a vacuum fence changes no rows
    rc, res, err = run_writer(spec)
    assert rc in (0, -signal.SIGKILL), err[-2000:]
    st = kstore.open_store(url)
    for v in load.log_versions(st, UUID):
        entry = load.load_entry(st, UUID, v)
        if entry.has_dataset:
            model.setdefault(v, new)
            assert set(ids_of(url, version=v)) == model[v], f"version {v} does not read as committed"
    assert set(ids_of(url)) == model[max(model)]
    meta = kstore.update_dataset(url, UUID, frame(["g"], [500]))
    assert set(ids_of(url)) == model[max(model)] | {500} and main_version(url) == meta.version
    kstore.garbage_collect(url, UUID, retention=pd.Timedelta(0).to_pytimedelta(), enforce_retention_duration=False)
    newest = kstore.load_metadata(url, UUID)
    left = {k for k in dataset_keys(url) if "/_kstore/log/" not in k}
    assert left == newest.referenced_keys() | {naming.metadata_key(UUID), naming.common_metadata_key(UUID)}
    assert set(ids_of(url)) == model[max(model)] | {500}


def test_crash_inside_put_leaves_no_temporary_file_after_gc(tmp_path):
    url, root = local_store(tmp_path)
    crash_base(url)
    rc, _, err = run_writer({"url": url, "uuid": UUID, "op": "append", "data": CRASH_APPEND,
                             "hook": {"pattern": r"^ds/table/", "n": 1, "when": "during"}})
    assert rc == -signal.SIGKILL, err[-2000:]
    assert any((root / ".kstore-tmp").iterdir())  # the interrupted put's temporary file
    kstore.update_dataset(url, UUID, frame(["g"], [500]))
    kstore.garbage_collect(url, UUID, retention=pd.Timedelta(0).to_pytimedelta(), enforce_retention_duration=False)
    leftovers = list((root / ".kstore-tmp").glob("*")) if (root / ".kstore-tmp").exists() else []
    assert not leftovers, f"temporary files of the dead writer were left behind: {leftovers}"


def store_has_version(url: str, v: int) -> bool:
    return kstore.open_store(url).exists(naming.log_key(UUID, v))


@pytest.mark.parametrize("op", ["overwrite", "delete_scope"])
def test_crash_after_claim_then_gc_before_the_next_writer(tmp_path, op):
    """A writer that replaces partitions dies after claiming its version: the main file still
    references the replaced files. A GC run before any other writer must not delete files
    the main file (what kartothek and the current read use) still references."""
    url, _ = local_store(tmp_path)
    model = crash_base(url)
    spec = {"url": url, "uuid": UUID, "op": op, "hook": {"pattern": r"^ds/_kstore/log/", "n": 1, "when": "after"}}
    if op == "overwrite":
        spec["data"] = frame(["a"], [900]).to_dict("list")
        model[2] = {1, 3, 4, 900}
    else:
        spec["scope"] = [{"p": "a"}]
        model[2] = {1, 3, 4}
    rc, res, err = run_writer(spec)
    assert rc == -signal.SIGKILL, err[-2000:]
    assert log_versions(url) == [0, 1, 2] and main_version(url) == 1
    check_all_versions_read(url, model)

    gc = kstore.garbage_collect(url, UUID, retention=pd.Timedelta(0).to_pytimedelta(), enforce_retention_duration=False)
    # GC's fence (version 3) repaired the main file; what version 2 references is intact
    assert gc.fence_version == 3 and main_version(url) == 3
    assert set(ids_of(url)) == model[2]
    meta = kstore.update_dataset(url, UUID, frame(["g"], [500]))
    assert meta.version == 4 and main_version(url) == 4
    assert set(ids_of(url)) == model[2] | {500}


GC_KILLS = {  # (key pattern, n-th matching call, count deletes instead of puts)
    "after-fence-claim": (r"^ds/_kstore/log/", 1, False),
    "after-gc-checkpoint": (r"^ds/_kstore/log/", 2, False),
    "after-first-tombstone": (r"^ds/_kstore/log/", 4, False),
    "after-first-data-file-delete": (r"^ds/table/", 1, True),
}


@pytest.mark.parametrize("kill_after", list(GC_KILLS))
def test_crashed_gc_leaves_every_listed_version_readable(tmp_path, kill_after):
    """GC killed half-way: every version the log still holds must read (an entry must never
    outlive the files it references), and the next GC finishes the job."""
    url, _ = local_store(tmp_path)
    model = crash_base(url)
    kstore.update_dataset(url, UUID, delete_scope=[{"p": "a"}])  # p=a files: only versions 0, 1
    model[2] = {1, 3, 4}
    pattern, n, deletes = GC_KILLS[kill_after]
    rc, _, err = run_writer({"url": url, "uuid": UUID, "op": "gc", "retention": 0,
                             "hook": {"pattern": pattern, "n": n, "when": "after", "deletes": deletes}})
    assert rc == -signal.SIGKILL, err[-2000:]
    model[3] = model[2]  # the fence: same rows
    st = kstore.open_store(url)
    for v in log_versions(url):
        if not load.load_entry(st, UUID, v).expired:
            assert set(ids_of(url, version=v)) == model[v], f"version {v} is retained but does not read"
    assert set(ids_of(url)) == model[2]
    gc = kstore.garbage_collect(url, UUID, retention=pd.Timedelta(0).to_pytimedelta(),
                                enforce_retention_duration=False)
    # a second fence only when the first run left garbage (it deletes in key order)
    last = 3 if gc.fence_version is None else 4
    assert gc.fence_version in (None, 4) and bool(gc.deleted_files) == (last == 4)
    assert [v for v in log_versions(url) if not load.load_entry(st, UUID, v).expired] == list(range(3, last + 1))
    newest = load.load_version(st, UUID, last)
    assert checkpoint_versions(dataset_keys(url)) <= {3, 4}  # GC checkpointed the oldest it retains
    assert without_checkpoints(dataset_keys(url)) == newest.referenced_keys() | {naming.log_key(UUID, v) for v in range(last + 1)} | {
        naming.metadata_key(UUID), naming.common_metadata_key(UUID)} | markers(range(3))
    assert set(ids_of(url)) == model[2]


def test_crashed_delete_dataset_can_be_finished(tmp_path):
    url, _ = local_store(tmp_path)
    crash_base(url)
    kstore.store_dataset(url, "other", frame(["a"], [1]), partition_on="p")
    rc, _, err = run_writer({"url": url, "uuid": UUID, "op": "delete_dataset",
                             "hook": {"pattern": r"^ds/", "n": 3, "when": "after", "deletes": True}})
    assert rc == -signal.SIGKILL, err[-2000:]
    with pytest.raises(DatasetNotFoundError):  # the delete version (2) is committed first
        kstore.read_dataset(url, UUID)
    kstore.delete_dataset(url, UUID)  # a second delete finishes the job (and commits version 3)
    # what stays: the log entries (tombstones younger than an hour, the delete fences)
    assert dataset_keys(url) == {naming.log_key(UUID, v) for v in range(4)}
    st = kstore.open_store(url)
    assert [load.load_entry(st, UUID, v).operation for v in range(4)] == ["create", "append", "delete", "delete"]
    assert ids_of_uuid(url, "other") == [1]
    # the dataset can be created again; the numbering continues
    assert kstore.store_dataset(url, UUID, frame(["z"], [9]), partition_on="p").version == 4
    assert ids_of_uuid(url, UUID) == [9]


def ids_of_uuid(url: str, uuid: str) -> list:
    return sorted(kstore.read_dataset(url, uuid, columns=["id"])["id"].tolist())


# ---------------------------------------------------------------------------------------
# retry budget: commit's max_attempts is reported, not silently exceeded
# ---------------------------------------------------------------------------------------


def test_commit_gives_up_with_a_clear_error_after_max_attempts(tmp_path):
    """A writer that loses every race raises CommitConflictError naming the attempts, and
    leaves no files behind (its data, index and statistics files are deleted)."""
    from kstore.blocks.commit import commit
    from kstore.blocks.write import FileLayout, write_partitions
    from kstore.core.operations import Append

    url, _ = local_store(tmp_path)
    crash_base(url)
    before = dataset_keys(url)

    def steal(method, key):  # another writer claims the version this one is about to claim
        if method == "put_if_absent" and "/_kstore/log/" in key:
            kstore.update_dataset(url, UUID, frame(["z"], [7000 + len(log_versions(url))]))

    st = HookStore(url, before=steal)
    import pyarrow as pa

    files = write_partitions(st, UUID, pa.Table.from_pandas(frame(["q"], [1])), FileLayout(("p",), ("x",)))
    schema = load.load_schema(st, load.load_latest(st, UUID)[0])
    with pytest.raises(CommitConflictError, match="gave up after 3 attempts"):
        commit(st, UUID, Append(partition_on=("p",), index_columns=("x",)),
               files=files, schema=schema, max_attempts=3)
    stolen = set(referenced_by_any_version(url)) | {naming.log_key(UUID, v) for v in log_versions(url)}
    leftovers = dataset_keys(url) - before - stolen - {f.key for f in files}
    assert not leftovers, f"index/statistics files of failed attempts were left: {leftovers}"



@pytest.mark.parametrize("where, error", [
    ("after-claim", KeyboardInterrupt),      # the entry landed, the interrupt came with the answer
    ("main-file", RuntimeError),              # a store adapter's own error while publishing
    ("main-file", KeyboardInterrupt),
])
def test_an_interrupt_or_foreign_error_after_the_claim_keeps_the_files(tmp_path, where, error):
    """Invariant 1: once the version is (or may be) committed, no cleanup deletes its files,
    whatever the exception (the claim's and the publish's KstoreErrors were handled before;
    an interrupt or an adapter's RuntimeError went to the write's cleanup, which deleted the
    data files of a committed version)."""
    url, _ = local_store(tmp_path)
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p", secondary_indices=["x"])

    def after(method, key, result):
        if where == "after-claim" and method == "put_if_absent" and "/_kstore/log/" in key:
            raise error("interrupted")

    def before(method, key):
        if where == "main-file" and method == "put" and key.startswith(f"{UUID}.by-dataset-metadata"):
            raise error("interrupted")

    with pytest.raises(error):
        kstore.update_dataset(HookStore(url, before=before, after=after), UUID, frame(["b", "b"], [1, 2]))
    assert log_versions(url) == [0, 1]
    assert sorted(kstore.read_dataset(url, UUID)["id"]) == [0, 1, 2]
    st = kstore.open_store(url)
    assert all(st.exists(k) for k in load.load_version(st, UUID, 1).referenced_keys())
