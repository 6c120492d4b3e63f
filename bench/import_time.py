"""Import time of kstore and start-up time of the ``kstore`` command line (issue #30).

Each case runs in a fresh interpreter (``sys.executable``), the cases interleaved per
repetition (a shared box slows every case alike); medians of the wall time of the whole
subprocess, interpreter start-up included:

- ``pandas+pyarrow``: ``python -c "import pandas, pyarrow"``, the floor kstore is judged against;
- ``kstore``: ``python -c "import kstore"`` (whatever kstore itself imports: pandas and pyarrow
  only where kstore needs them at import);
- ``pandas+pyarrow+kstore``: ``python -c "import pandas, pyarrow, kstore"``;
- ``kstore, first API call``: ``import kstore; kstore.store_dataset``: what a program that uses
  kstore pays in all (the API is imported on first use);
- ``kstore --help``: ``python -m kstore --help``;
- ``python``: ``python -c "pass"`` (the interpreter alone, for reference).

Targets (issue #30): ``pandas+pyarrow+kstore`` <= 1.1x ``pandas+pyarrow``; ``kstore --help``
<= 0.3 s. The script also says which of pandas, pyarrow and kstore's blocks each case
loaded (one extra, untimed run).

    python bench/import_time.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASES: dict[str, list[str]] = {
    "python": ["-c", "pass"],
    "pandas+pyarrow": ["-c", "import pandas, pyarrow"],
    "kstore": ["-c", "import kstore"],
    "pandas+pyarrow+kstore": ["-c", "import pandas, pyarrow, kstore"],
    "kstore, first API call": ["-c", "import kstore; kstore.store_dataset"],
    "kstore --help": ["-m", "kstore", "--help"],
}

# what each case loaded: the same code, then the modules of interest in sys.modules
_PROBE = """
import sys, runpy
{code}
print(",".join(m for m in ("pandas", "pyarrow", "kstore.blocks", "kstore.blocks.gc", "kstore.blocks.commit")
               if m in sys.modules), file=sys.__stderr__)
"""
_HELP_CODE = """
sys.argv = ["kstore", "--help"]
try:
    runpy.run_module("kstore", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
"""


def run_once(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def loaded(name: str, args: list[str]) -> str:
    code = _HELP_CODE if name == "kstore --help" else args[1]
    p = subprocess.run([sys.executable, "-c", _PROBE.format(code=code)], check=True, capture_output=True, text=True)
    return p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15, help="fresh interpreters per case (median reported)")
    args = ap.parse_args()
    env_note = f"python {sys.version.split()[0]} ({sys.executable}), {os.cpu_count()} CPUs"
    for a in CASES.values():  # warm the page cache and the bytecode caches, untimed
        run_once(a)
    times: dict[str, list[float]] = {k: [] for k in CASES}
    load0 = os.getloadavg()[0]
    for _ in range(args.repeats):
        for k, a in CASES.items():
            times[k].append(run_once(a))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{env_note}; repeats={args.repeats}; loadavg before={load0:.1f} after={os.getloadavg()[0]:.1f}")
    print(f"{'case':<24} {'median s':>9} {'min s':>7} {'max s':>7}  loaded")
    for k, v in times.items():
        print(f"{k:<24} {med[k]:9.3f} {min(v):7.3f} {max(v):7.3f}  {loaded(k, CASES[k]) or '-'}")
    base = med["pandas+pyarrow"]
    print(f"ratio kstore / pandas+pyarrow:                {med['kstore'] / base:.2f}x")
    print(f"ratio pandas+pyarrow+kstore / pandas+pyarrow: {med['pandas+pyarrow+kstore'] / base:.2f}x (target <= 1.1x)")
    print(f"ratio kstore, first API call / pandas+pyarrow: {med['kstore, first API call'] / base:.2f}x")
    print(f"kstore --help: {med['kstore --help']:.3f} s (target <= 0.3 s)")


if __name__ == "__main__":
    main()
