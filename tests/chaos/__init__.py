"""Tests of the chaos harness (``benchmarks/chaoslib``).

``benchmarks/`` is not a package of the project: its ``chaoslib`` is put on
``sys.path`` here, so every module of this package can import it.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The repository root and its ``benchmarks/`` directory (the workers' cwd).
ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
