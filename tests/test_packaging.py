"""The built wheel carries what the package reads at run time."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_wheel_contains_package_data_and_entry_point(tmp_path: Path) -> None:
    """The wheel holds py.typed, every SQL and Lua file, the CLI entry point and the version from __init__."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=280,
    )
    (wheel,) = tmp_path.glob("leasecron-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "leasecron/py.typed" in names
    data = [*(ROOT / "leasecron" / "stores" / "sql").glob("*.sql"), *(ROOT / "leasecron" / "stores" / "lua").glob("*.lua")]
    assert len(data) >= 7
    for path in data:
        assert f"leasecron/stores/{path.parent.name}/{path.name}" in names, path.name
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "leasecron = leasecron.cli:main" in text
    import leasecron

    assert wheel.name.startswith(f"leasecron-{leasecron.__version__}-")
