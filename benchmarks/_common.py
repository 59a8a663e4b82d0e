"""What the benchmark scripts share: a fresh process per configuration, and tables.

A process of its own gives each configuration its own peak memory (max RSS,
imports included) and lets thread settings made through the environment
apply before numpy is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def run_worker(script, args, *, one_thread, timeout):
    """Run ``python script --worker *args``; return ``(result, error)``.

    The worker prints its result as a JSON line; ``result`` is that dict,
    or None with ``error`` a short reason (timeout, exit status, last line
    of stderr). ``one_thread`` sets the BLAS thread variables to 1;
    otherwise they are removed, so that BLAS uses its default.
    """
    env = dict(os.environ)
    for k in THREAD_VARIABLES:
        if one_thread:
            env[k] = "1"
        else:
            env.pop(k, None)
    cmd = [sys.executable, script, "--worker", *map(str, args)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        return None, (out.stderr.strip().splitlines() or ["failed"])[-1][:80]
    return json.loads(lines[-1]), None


def print_table(header, rows):
    """Print a markdown table, then a blank line."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |", flush=True)
    print()
