"""Writer subprocess for tests/drivers/test_commit_reliability.py (not a test module).

Usage: ``python _crash_writer.py '<json spec>'``. It runs one kstore write (or a loop of
appends) against a local-directory store, with optional hooks installed on
``put`` / ``put_if_absent`` (and ``delete``) of the store class the URL opens
(:class:`~kstore.io.local.LocalStore`, or :class:`~kstore.io.s3.S3Store` for ``s3://``):

``hook``     ``{"pattern": regex, "n": N, "when": "before" | "after"}``: at the N-th
             put/put_if_absent whose key matches ``pattern`` (searched), the process
             kills itself with SIGKILL, before or after the real call. Nothing is flushed,
             no ``finally`` runs: this is a crash. ``"when": "during"`` (``put`` only)
             first writes the store's temporary file, as a crash inside ``put`` would.
``barrier``  ``{"dir": path, "name": str, "count": k}``: at the first claim of a log entry
             (``put_if_absent`` of ``<uuid>/_kstore/log/...``), create ``<dir>/<name>.ready``
             and wait until ``count`` ``.ready`` files exist. All writers then hold the same
             base version and race for the same log key.
``after_version``  wait, at the first claim, until the log entry of that version exists
             (orders the claims of two writers deterministically).
``start_flag``  create ``ready_file`` (if given), then wait for ``start_flag`` to exist
             before starting (all imports done by then).

Every ``put_if_absent`` of a log key is counted (``claims``, and ``lost`` when it returned
False: a lost race, followed by a retry inside ``commit``). The result is one JSON line
on stdout: ``{"ok": bool, "error": type name, "message": str, "claims": .., "lost": ..,
"versions": [...], "seconds": [...]}``.

Operations (``op``):

``append``          ``update_dataset(url, uuid, data)``
``appends``         ``n`` appends by writer ``writer`` (one new partition each, see
                    :func:`append_frame`); errors are recorded and the loop continues.
                    ``attempts`` lists the log claims each append needed.
``churn``           like ``appends``, but every third step also deletes (``delete_scope``)
                    the writer's previous partition, so row counts go up and down.
``delete_scope``    ``update_dataset(url, uuid, delete_scope=scope)``
``overwrite``       ``update_dataset(url, uuid, data, mode="overwrite_partitions")``
``build_indices``   ``build_indices(url, uuid, columns)``
``gc``              ``garbage_collect(url, uuid, retention=timedelta(seconds=retention))``
``delete_dataset``  ``delete_dataset(url, uuid)``

With ``"deletes": true`` in the hook, ``delete`` calls count (and kill) instead of
``put`` / ``put_if_absent`` calls.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import traceback

POLL = 0.002
WAIT_LIMIT = 60.0


def rows_of(writer: int, j: int, rows: int) -> int:
    """Row count of append ``j`` by ``writer`` (varies, so row counts tell versions apart)."""
    return rows + (writer + j) % 4


def append_frame(writer: int, j: int, rows: int):
    """Rows of append ``j`` by ``writer``: one partition ``p=w<writer>_<jjj>``.

    ``id`` is globally unique (``writer * 100_000 + j * 100 + k``), ``wr`` (indexed) names
    the writer, ``x`` (indexed) is unique per append.
    """
    import pandas as pd

    rows = rows_of(writer, j, rows)

    return pd.DataFrame(
        {
            "p": [f"w{writer}_{j:03d}"] * rows,
            "id": [writer * 100_000 + j * 100 + k for k in range(rows)],
            "wr": [f"w{writer}"] * rows,
            "x": [writer * 1000 + j] * rows,
            "v": [float(k) for k in range(rows)],
        }
    )


def _wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(POLL)


def main(spec: dict) -> dict:
    import pandas as pd

    import kstore
    from kstore.io.local import LocalStore

    url, uuid = spec["url"], spec["uuid"]
    if url.startswith("s3://"):
        from kstore.io.s3 import S3Store as Hooked
    else:
        Hooked = LocalStore
    root = url[len("file://"):] if url.startswith("file://") else url
    log_re = re.compile(re.escape(uuid) + r"/_kstore/log/\d{20}\.json$")  # claims: entries, not checkpoints
    hook = spec.get("hook")
    hook_re = re.compile(hook["pattern"]) if hook else None
    barrier = spec.get("barrier")
    after_version = spec.get("after_version")
    lock = threading.Lock()
    state = {"matches": 0, "claims": 0, "lost": 0, "first_claim": True}

    def kill(during=None) -> None:
        if during is not None:
            during()  # half of the call happened (e.g. the temporary file is written)
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # never reached

    def before_call(key: str, during=None) -> int:
        """Count a matching call; kill if it is the N-th and the hook says before/during."""
        if hook_re is None or not hook_re.search(key):
            return 0
        with lock:
            state["matches"] += 1
            n = state["matches"]
        if n == hook["n"] and hook["when"] in ("before", "during"):
            kill(during if hook["when"] == "during" else None)
        return n

    def after_call(n: int) -> None:
        if n and n == hook["n"] and hook["when"] == "after":
            kill()

    def at_first_claim() -> None:
        if not state["first_claim"]:
            return
        state["first_claim"] = False
        if barrier:
            bdir = barrier["dir"]
            open(os.path.join(bdir, barrier["name"] + ".ready"), "w").close()
            _wait_for(lambda: sum(f.endswith(".ready") for f in os.listdir(bdir)) >= barrier["count"], "the barrier")
        if after_version is not None:
            log = os.path.join(root, uuid, "_kstore", "log", f"{after_version:020d}.json")
            _wait_for(lambda: os.path.exists(log), f"version {after_version}")

    orig_put, orig_pia, orig_delete = Hooked.put, Hooked.put_if_absent, Hooked.delete

    def put(self, key, data):
        n = before_call(key, during=lambda: self._tmp_file(data, key)) if not (hook and hook.get("deletes")) else 0
        orig_put(self, key, data)
        after_call(n)

    def put_if_absent(self, key, data):
        is_claim = bool(log_re.search(key))
        if is_claim:
            at_first_claim()
        n = before_call(key) if not (hook and hook.get("deletes")) else 0
        ok = orig_pia(self, key, data)
        if is_claim:
            with lock:
                state["claims"] += 1
                state["lost"] += not ok
        after_call(n)
        return ok

    def delete(self, key):
        n = before_call(key) if hook and hook.get("deletes") else 0
        orig_delete(self, key)
        after_call(n)

    Hooked.put, Hooked.put_if_absent, Hooked.delete = put, put_if_absent, delete

    if spec.get("ready_file"):
        open(spec["ready_file"], "w").close()
    if spec.get("start_flag"):
        _wait_for(lambda: os.path.exists(spec["start_flag"]), "the start flag")

    out: dict = {"ok": True, "error": None, "message": "", "versions": [], "seconds": [], "errors": [],
                 "attempts": []}
    op = spec["op"]
    out["t_start"] = time.time()
    t0 = time.perf_counter()
    try:
        if op in ("appends", "churn"):
            w = spec["writer"]
            for j in range(spec["n"]):
                steps = [("append", j)]
                if op == "churn" and j % 3 == 2:
                    steps.append(("delete", j - 1))
                for kind, jj in steps:
                    t = time.perf_counter()
                    claims0 = state["claims"]
                    try:
                        if kind == "append":
                            meta = kstore.update_dataset(url, uuid, append_frame(w, jj, spec["rows"]))
                        else:
                            meta = kstore.update_dataset(url, uuid, delete_scope=[{"p": f"w{w}_{jj:03d}"}])
                        out["versions"].append(meta.version)
                    except kstore.KstoreError as exc:
                        out["ok"] = False
                        out["errors"].append(f"{type(exc).__name__}: {exc}")
                    out["seconds"].append(time.perf_counter() - t)
                    out["attempts"].append(state["claims"] - claims0)
        elif op == "append":
            meta = kstore.update_dataset(url, uuid, pd.DataFrame(spec["data"]))
            out["versions"].append(meta.version)
        elif op == "overwrite":
            meta = kstore.update_dataset(url, uuid, pd.DataFrame(spec["data"]), mode="overwrite_partitions")
            out["versions"].append(meta.version)
        elif op == "delete_scope":
            meta = kstore.update_dataset(url, uuid, delete_scope=spec["scope"])
            out["versions"].append(meta.version)
        elif op == "gc":
            import datetime as dt

            kstore.garbage_collect(url, uuid, retention=dt.timedelta(seconds=spec["retention"]),
                                   enforce_retention_duration=False)
        elif op == "delete_dataset":
            kstore.delete_dataset(url, uuid)
        elif op == "build_indices":
            meta = kstore.build_indices(url, uuid, spec["columns"])
            out["versions"].append(meta.version)
        else:
            raise ValueError(f"unknown op {op!r}")
    except Exception as exc:
        out.update(ok=False, error=type(exc).__name__, message=str(exc), trace=traceback.format_exc())
    out["elapsed"] = time.perf_counter() - t0
    out["t_end"] = time.time()
    out["claims"], out["lost"] = state["claims"], state["lost"]
    return out


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is out; skip interpreter teardown. pyarrow's native thread pools can abort
    # at exit ("terminate called without an active exception", apache/arrow#34314), which
    # would read as a crashed writer although the write returned.
    os._exit(0)
