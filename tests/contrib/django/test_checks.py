"""`manage.py check`: each problem of settings.LEASECRON as an error with its id, a store that
does not answer as a warning, found within a bounded wait."""

from __future__ import annotations

import socket
import time
from typing import Any, Iterator, List

import pytest

from leasecron.contrib.django.checks import PROBE_TIMEOUT_S
from tests.servers import free_port

from .conftest import Project


@pytest.mark.parametrize(
    "setting, expected",
    [
        ("unset", ["?: (leasecron.E001) settings.LEASECRON is not set"]),
        ({"lease_ms": 1000}, ["?: (leasecron.E002) settings.LEASECRON has no 'STORE': leasecron needs a store"]),
        ({"STORE": "mysql://db/x"},
         ["?: (leasecron.E003) settings.LEASECRON['STORE']: unknown store URL scheme 'mysql'"]),
        (
            {"STORE": "memory://", "Lease_Ms": 1000, "retry": 1},
            ["?: (leasecron.E004) settings.LEASECRON has unknown key(s): 'Lease_Ms' (did you mean 'lease_ms'?),"
             " 'retry' (did you mean 'retries'?)"],
        ),
        (
            {"STORE": "memory://", "overlap": "sometimes", "poll_ms": 0},
            ["?: (leasecron.E005) settings.LEASECRON: overlap must be 'skip' or 'allow', not 'sometimes'",
             "?: (leasecron.E005) settings.LEASECRON: poll_ms must be an integer from 1 to 2**50, not 0"],
        ),
        (
            {"STORE": "memory://", "lease_ms": 3000, "timeout_ms": 100, "heartbeat_ms": 500},
            ["?: (leasecron.E006) settings.LEASECRON: timeout_ms (100) must be at least heartbeat_ms (500)"],
        ),
    ],
)  # fmt: skip
def test_check_reports_each_bad_setting_as_an_error(project: Project, setting: Any, expected: List[str]) -> None:
    """`manage.py check` exits 1 and names each problem with its id; other commands that run the
    checks refuse to run, `manage.py leasecron` included."""
    project.set(setting)
    done = project.manage("check")
    assert done.returncode == 1, done.stderr
    assert "SystemCheckError" in done.stderr and "ERRORS:" in done.stderr
    for line in expected:
        assert line in done.stderr
    assert f"System check identified {len(expected)} issue" in done.stderr
    refused = project.manage("leasecron", "jobs")
    assert refused.returncode == 1 and expected[0] in refused.stderr


def test_check_passes_a_good_setting(project: Project) -> None:
    """A valid setting whose store answers: no issue, exit 0; `--tag leasecron` runs leasecron's checks alone."""
    assert "System check identified no issues" in project.ok("check")
    assert "System check identified no issues" in project.ok("check", "--tag", "leasecron")


def test_an_unreachable_store_is_a_warning(project: Project) -> None:
    """A store that refuses the connection: the warning leasecron.W001 with the driver's reason and
    without the password; check still exits 0 (a store down for a moment stops no migration)."""
    project.set({"STORE": f"redis://:hush@127.0.0.1:{free_port()}/0"})
    done = project.manage("check")
    assert done.returncode == 0, done.stderr
    assert "WARNINGS:" in done.stderr
    assert "?: (leasecron.W001) the store 'redis://:***@127.0.0.1:" in done.stderr
    assert "does not answer: StoreUnavailable: " in done.stderr and "Connection refused" in done.stderr
    assert "hush" not in done.stderr


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port whose server accepts connections and never answers; its port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def test_a_store_that_does_not_answer_costs_the_check_the_probe_timeout(project: Project, silent_server: int) -> None:
    """A server that accepts the connection and never answers (Redis would wait out its 5 s socket
    timeout): the check gives up after PROBE_TIMEOUT_S, says so, and the command ends at once."""
    started = time.monotonic()
    project.ok("check")
    baseline = time.monotonic() - started
    project.set({"STORE": f"redis://127.0.0.1:{silent_server}/0"})
    started = time.monotonic()
    done = project.manage("check")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert f"does not answer: no answer within {PROBE_TIMEOUT_S:g} s" in done.stderr
    assert PROBE_TIMEOUT_S <= took < baseline + PROBE_TIMEOUT_S + 1.5, (took, baseline)
