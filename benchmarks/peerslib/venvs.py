"""The peers that cannot share leasecron's environment, each in a virtual environment of its own.

APScheduler 4 and APScheduler 3 are one distribution name (``apscheduler``):
they cannot be installed side by side, and ``peers.py`` measures both. So
APScheduler 4 runs from a virtual environment of its own, and celery with
celery-redbeat from another (they stay out of leasecron's environment, and
out of its dependencies, runtime or extra). Each is made on first use in the
cache directory (``--venv-dir``; default ``$XDG_CACHE_HOME/leasecron-peers``,
else ``~/.cache/leasecron-peers``) with ``python -m venv`` and ``pip
install`` of :data:`REQUIREMENTS` (from the package index: this needs the
network once), and reused while its stamp file says it was made from the
same requirements by the same Python (the stamp is written last, once
``pip install`` succeeded; a failed build is removed). A lock file beside each
keeps two runs from making one at the same time.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

#: What each environment is made of. APScheduler 4.0.0a6 is the newest release on the index (a pre-release);
#: it imports sniffio and SQLAlchemy's asyncio extension (greenlet) without requiring them.
REQUIREMENTS: Dict[str, List[str]] = {
    "apscheduler4": ["apscheduler==4.0.0a6", "sqlalchemy[asyncio]>=2.0", "psycopg[binary]>=3.1", "redis>=5.0",
                     "sniffio>=1.3"],
    "redbeat": ["celery[redis]>=5.3,<6", "celery-redbeat==2.4.2"],
}  # fmt: skip
#: The distributions whose versions are printed, per environment.
SHOWN: Dict[str, List[str]] = {
    "apscheduler4": ["APScheduler", "SQLAlchemy", "psycopg", "redis"],
    "redbeat": ["celery", "celery-redbeat", "kombu", "redis"],
}
#: How long one environment's pip install may take.
BUILD_TIMEOUT_S = 900
STAMP = "leasecron-peers.json"


@dataclass
class Venv:
    """A ready environment: its Python, the versions of what matters in it, and whether it was made now."""

    name: str
    python: str
    versions: Dict[str, str]
    built_s: Optional[float]  # seconds it took to make it now; None if reused


def default_dir() -> str:
    """``$XDG_CACHE_HOME/leasecron-peers`` or ``~/.cache/leasecron-peers``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "leasecron-peers")


def _stamp(name: str) -> Dict[str, object]:
    return {"requirements": REQUIREMENTS[name], "python": sys.version.split()[0], "base": sys.base_prefix}


def _python(path: str) -> str:
    return os.path.join(path, "Scripts" if os.name == "nt" else "bin", "python")


def _reusable(path: str, name: str) -> bool:
    try:
        with open(os.path.join(path, STAMP), encoding="utf-8") as f:
            return bool(json.load(f) == _stamp(name) and os.path.exists(_python(path)))
    except (OSError, ValueError):
        return False


def _versions(python: str, name: str) -> Dict[str, str]:
    """The versions of :data:`SHOWN` installed in the environment (RuntimeError if it does not run)."""
    code = ("import json, sys; from importlib.metadata import version; "
            "print(json.dumps({d: version(d) for d in sys.argv[1:]}))")  # fmt: skip
    done = subprocess.run([python, "-c", code, *SHOWN[name]], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"its Python does not answer: {done.stderr.strip()[-500:]}")
    return dict(json.loads(done.stdout))


def _start_build(path: str, name: str) -> "subprocess.Popen[str]":
    """``python -m venv`` (here), then ``pip install`` in a child this returns."""
    shutil.rmtree(path, ignore_errors=True)  # an outdated or half-made one
    subprocess.run([sys.executable, "-m", "venv", path], check=True, capture_output=True, timeout=120)
    pip = [_python(path), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *REQUIREMENTS[name]]
    return subprocess.Popen(pip, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ensure(names: List[str], root: str, say: Callable[[str], None]) -> Dict[str, Union[Venv, str]]:
    """Each named environment, reused or made now (in parallel): name -> :class:`Venv`, or the reason
    it could not be made. A lock file per environment keeps two runs from making one at once."""
    os.makedirs(root, exist_ok=True)
    found: Dict[str, Union[Venv, str]] = {}
    building: Dict[str, Tuple["subprocess.Popen[str]", float]] = {}
    built: Dict[str, float] = {}
    with ExitStack() as locks:
        for name in names:
            path = os.path.join(root, name)
            lock = locks.enter_context(open(path + ".lock", "w"))
            fcntl.flock(lock, fcntl.LOCK_EX)  # another run making it: wait for it
            if _reusable(path, name):
                continue
            say(f"making the {name} environment in {path} (once): pip install {' '.join(REQUIREMENTS[name])}")
            try:
                building[name] = (_start_build(path, name), time.monotonic())
            except (OSError, subprocess.SubprocessError) as exc:
                shutil.rmtree(path, ignore_errors=True)
                found[name] = f"python -m venv failed: {exc}"
        for name, (proc, started) in building.items():
            path = os.path.join(root, name)
            try:
                output, _ = proc.communicate(timeout=BUILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
            except BaseException:  # Ctrl-C, SIGTERM: no pip left running, no half-made environment left
                for other, _ in building.values():
                    other.kill()
                    other.wait()
                for other_name in building:
                    shutil.rmtree(os.path.join(root, other_name), ignore_errors=True)
                raise
            if proc.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                lines = [line for line in output.splitlines() if "is ignored" not in line]  # pip's notes on indexes
                found[name] = f"pip install failed ({proc.returncode}): " + " / ".join(lines[-3:])
                continue
            with open(os.path.join(path, STAMP), "w", encoding="utf-8") as f:  # written last: complete
                json.dump(_stamp(name), f)
            built[name] = time.monotonic() - started
    for name in names:
        if name in found:
            continue
        python = _python(os.path.join(root, name))
        try:
            found[name] = Venv(name, python, _versions(python, name), built.get(name))
        except (OSError, RuntimeError, subprocess.SubprocessError, ValueError) as exc:
            found[name] = f"{python}: {exc}"
    return found
