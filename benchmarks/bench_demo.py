"""The main job's tables as a result file: ``python -m rvm_ppl.demo``, timed as a user meets it.

    python benchmarks/bench_demo.py                 # the demo's defaults
    python benchmarks/bench_demo.py --n 30 --draws 60 --chains 2   # a quick look
    python benchmarks/bench_demo.py --figures out                # and keep its figures in out/

Runs :func:`rvm_ppl.demo.main` in this process (its figures go to a temporary
folder) and records every table of the ``methods.md`` it writes (the fits of
noisy sinc and of Ripley's 100 points, and their ``summary_table``) under the
heading it stands under, with the run's wall time. Run it in a fresh process
on an idle machine: the fit times include compiling what the process has not
compiled before.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import (
    add_results_argument,
    record_note,
    record_table,
    results_name,
    results_recorder,
    write_results,
)


def markdown_tables(text):
    """``(title, header, rows)`` of every markdown table in ``text``.

    A table's title is the ``#`` heading above it, followed by the ``##``
    heading between them if there is one (``"Noisy sinc ...: Did the ..."``).
    """
    tables, title, block = [], None, []
    top = None

    def flush():
        if block:
            cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block]
            tables.append((title, cells[0], cells[2:]))  # cells[1] is the separator
            block.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            block.append(line)
            continue
        flush()
        if line.startswith("## "):
            title = f"{top}: {line[3:].strip()}"
        elif line.startswith("# "):
            title = top = line[2:].strip()
    flush()
    return tables


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=None, help="the demo's --n")
    p.add_argument("--draws", type=int, default=None, help="the demo's --draws")
    p.add_argument("--chains", type=int, default=None, help="the demo's --chains")
    p.add_argument("--figures", default=None,
                   help="keep the demo's figures and methods.md in this folder (default: discarded)")
    add_results_argument(p)
    args = p.parse_args()
    results_recorder(results_name(__file__), notes=args.note)
    demo_args = [f"--{k}={getattr(args, k)}" for k in ("n", "draws", "chains")
                 if getattr(args, k) is not None]

    from rvm_ppl import demo

    with tempfile.TemporaryDirectory() as tmp:
        out = args.figures or tmp
        start = time.perf_counter()
        demo.main(["--out", out, *demo_args])
        seconds = time.perf_counter() - start
        text = (Path(out) / "methods.md").read_text()
    for title, header, rows in markdown_tables(text):
        record_table(title, header, rows)
    record_note(f"The demo ran for {seconds:.1f} s in this process "
                "(imports before it not counted).")
    write_results(args.out)


if __name__ == "__main__":
    main()
