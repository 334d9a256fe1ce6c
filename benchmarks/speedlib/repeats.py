"""``--repeat N`` of ``fire_lag.py`` and ``burst.py``: each headline figure's median and range over N runs.

On a shared machine one run can be noisy (another process takes a core for a
second), so a target is judged on N runs, each with fresh instance processes
on the same store: the scripts print each run's report as usual, then
:func:`print_repeats`: per figure, the median of the N runs, their range
(min-max) and every run's value in order, so that an outlier shows as one.
:func:`summarize` gives the same as numbers (``burst.py --json``).

A run's figures are a mapping of label (``"handler starts p99, ms"``) to a
number, or None where that run has none (no handler started); the labels
of the first run give the order.
"""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence

#: A run's headline figures: label -> value (None: the run has none).
Figures = Mapping[str, Optional[float]]


def _labels(runs: Sequence[Figures]) -> List[str]:
    """Every label of the runs, in the order they first appear."""
    return list(dict.fromkeys(label for run in runs for label in run))


def summarize(runs: Sequence[Figures]) -> Dict[str, Dict[str, Any]]:
    """Per label: the ``median``, ``min`` and ``max`` of the runs that have a value (None if none
    has), and ``runs``, every run's value in order (None where it has none)."""
    found: Dict[str, Dict[str, Any]] = {}
    for label in _labels(runs):
        each = [run.get(label) for run in runs]
        values = [v for v in each if v is not None]
        found[label] = {
            "median": statistics.median(values) if values else None,
            "min": min(values) if values else None,
            "max": max(values) if values else None,
            "runs": each,
        }
    return found


def number(value: Optional[float]) -> str:
    """A figure as the summary prints it: three significant digits or so, ``-`` for none."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def print_repeats(title: str, runs: Sequence[Figures]) -> None:
    """The summary of N runs' figures: a line per label with the median, the range and each run's value."""
    print(f"\n{title}, {len(runs)} runs: the median and range (min-max) of each run's figure")
    print(f"  {'figure':<40} {'median':>8}  {'range':<15} runs in order")
    for label, cell in summarize(runs).items():
        spread = f"{number(cell['min'])}-{number(cell['max'])}"
        each = " ".join(number(v) for v in cell["runs"])
        print(f"  {label:<40} {number(cell['median']):>8}  {spread:<15} {each}")
