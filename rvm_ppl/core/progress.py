"""A live progress line for the closed-form fits (evidence, vb, eta learning).

PyMC draws progress bars for nuts and advi. The closed-form fits take well
under a second up to tens of thousands of points and show nothing then; a
fit that runs longer than :data:`DELAY` seconds gets one line on standard
error, redrawn in place (``\\r``), with the iteration, the model size and the
objective, ended by a last line when the fit ends. ``show=False`` (the
estimators' ``progressbar=False``) turns it off. Plain text, so nothing is
left behind if the fit raises, and Jupyter shows it as a terminal does.
"""

from __future__ import annotations

import sys
import time

DELAY = 2.0  # seconds before a fit shows a line
EVERY_TTY = 0.25  # seconds between redraws on a terminal or in Jupyter
EVERY_LOG = 10.0  # ... when standard error is a file or a pipe


class FitProgress:
    """One redrawn status line, fed by a fitter's loop.

    Parameters
    ----------
    label : str
        What is fitted, e.g. ``"evidence"``.
    objective : str
        Name of the number reported, e.g. ``"log evidence"``.
    show : bool
        Draw the line at all.
    delay : float, optional
        Seconds the fit must run before the line appears (default
        :data:`DELAY`).
    stream : file, optional
        Default ``sys.stderr`` (at the time of the first line).
    unit : str
        What ``n_basis`` counts.
    """

    def __init__(self, label, objective, show=True, delay=None, stream=None,
                 unit="basis functions"):
        self.label, self.objective, self.unit = label, objective, unit
        self.show, self.delay = bool(show), float(DELAY if delay is None else delay)
        self.stream = stream
        self.start = self.last = time.perf_counter()
        self.shown = False
        self.width = 0

    def _text(self, iteration, n_basis, objective):
        return (f"{self.label}: iteration {iteration:,}, {n_basis:,} {self.unit}, "
                f"{self.objective} {objective:,.6g}, {time.perf_counter() - self.start:.0f} s")

    def _write(self, text, end=""):
        stream = self.stream or sys.stderr
        stream.write("\r" + text.ljust(self.width) + end)
        stream.flush()
        self.width = len(text)

    def update(self, iteration, n_basis, objective):
        """Redraw the line if the fit has run ``delay`` s and the last redraw is old enough."""
        if not self.show:
            return
        now = time.perf_counter()
        stream = self.stream or sys.stderr
        every = EVERY_TTY if (getattr(stream, "isatty", lambda: False)() or "ipykernel" in sys.modules) \
            else EVERY_LOG
        if now - self.start < self.delay or (self.shown and now - self.last < every):
            return
        self.last, self.shown = now, True
        self._write(self._text(iteration, n_basis, objective))

    def finish(self, iteration, n_basis, objective, converged=True):
        """End the line with the final state, if a line was shown."""
        if self.shown:
            done = "converged" if converged else "stopped at max_iter"
            self._write(f"{self._text(iteration, n_basis, objective)}: {done}", end="\n")
            self.shown = False
