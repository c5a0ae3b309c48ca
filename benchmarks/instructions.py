"""Client instructions per enqueue call, counted by valgrind: ``python -m benchmarks.instructions
[CHECKOUT ...]``.

A wall-clock A/B of a call that takes half a millisecond, most of it waiting on the server, needs
a quiet machine and many rounds to see 10 µs of client CPU; an instruction count sees it at once,
at any load, and says the same on every run. Each checkout's pgqueue (default: this one) runs
one process under ``valgrind --tool=callgrind`` that enqueues ``--calls`` one-job calls on a
throwaway PostgreSQL server, counting only inside that loop (a client request toggles the
count, so start-up, imports and the server's start do not enter it). A checkout of an older
commit works when this file's ``benchmarks`` and ``tests`` directories are checked out over it.

Needs ``valgrind`` and a C compiler (Debian: ``valgrind``, ``gcc``); on demand only, not in CI.
Found issue #26's single-enqueue regression: 475 k instructions a call against the base's
440 k, all of it a JSON parse per call (docs/benchmarks.md, "Client instructions per enqueue").
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_TOGGLE_C = "#include <valgrind/callgrind.h>\nvoid toggle(void) { CALLGRIND_TOGGLE_COLLECT; }\n"

_CHILD = """
import ctypes, os, sys
from benchmarks.common import Databases, opened
toggle = ctypes.CDLL(sys.argv[1]).toggle
calls = int(sys.argv[2])
databases = Databases()
try:
    with opened(databases.fresh("postgresql", "instructions")) as queue:
        for n in range(100):  # connect, prepare, warm every cache first
            queue.enqueue("bench.noop", args=[n])
        toggle()
        for n in range(calls):
            queue.enqueue("bench.noop", args=[n])
        toggle()
finally:
    databases.close()
"""


def count(checkout: Path, helper: Path, calls: int, scratch: Path) -> float:
    """Instructions per one-job ``enqueue`` call with ``checkout``'s pgqueue."""
    out = scratch / f"callgrind.{checkout.name}"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            _CHILD,
            str(helper),
            str(calls),
        ],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout), "PYTHONHASHSEED": "0"},
        check=True,
        capture_output=True,
    )
    found = re.search(r"^summary: (\d+)", out.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no summary line in {out}")
    return int(found.group(1)) / calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__)
    parser.add_argument("checkouts", nargs="*", type=Path, default=[ROOT])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args(argv)
    missing = [tool for tool in ("valgrind", "cc") if shutil.which(tool) is None]
    if missing:
        parser.error(f"needs {' and '.join(missing)} (Debian: valgrind, gcc)")
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch, "toggle.c")
        source.write_text(_TOGGLE_C)
        helper = Path(scratch, "toggle.so")
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", helper, source], check=True)
        for checkout in args.checkouts:
            per_call = count(checkout.resolve(), helper, args.calls, Path(scratch))
            print(f"{checkout}: {per_call / 1000:.0f} k instructions per one-job enqueue")


if __name__ == "__main__":
    main()
