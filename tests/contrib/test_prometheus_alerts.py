"""The alerting recipes (issue 32, "Watching it"): examples/prometheus/alerts.yml, each rule's
expression evaluated against the exposition real instrumented LeaseCron instances serve after
real runs on a real store (two scrapes, as Prometheus stores them: leasecron's ``job`` label as
``exported_job``); the promtool unit tests next to it, run by promtool where it is installed, and
checked by the same evaluator everywhere (with each rule's ``for``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from leasecron import MemoryStore
from leasecron.contrib.prometheus import instrument
from tests.contrib.promql_subset import Evaluator, Labels, Samples, Vector
from tests.engine import conftest as engine_conftest
from tests.engine.conftest import MakeCron
from tests.engine.support import CATCH_UP_HOUR, dead_claim, fence, waiting_on_its_signal
from tests.test_watching import DAILY, DAY_MS, LATE_MS, ended

make_cron = engine_conftest.make_cron
gates = engine_conftest.gates
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "prometheus"
RULES = EXAMPLE / "alerts.yml"
UNIT_TESTS = EXAMPLE / "alerts_test.yml"


def rules() -> Dict[str, Tuple[str, int]]:
    """Each alert of alerts.yml: its expression and its ``for`` in minutes (0 without one)."""
    text = RULES.read_text()
    found = {}
    for block in re.split(r"\n\s+- alert: ", text)[1:]:
        name = block.split("\n", 1)[0].strip()
        expr = re.search(r"^\s+expr: (.+)$", block, re.M)
        wait = re.search(r"^\s+for: (\d+)m$", block, re.M)
        assert expr is not None, name
        found[name] = (expr.group(1).strip(), int(wait.group(1)) if wait else 0)
    return found


def stored_as_prometheus_does(exposition: str, instance: str = "tasks-0:8000") -> Dict[Labels, float]:
    """A scrape as Prometheus stores it (honor_labels: false): the target's job and instance
    labels added, the exposition's own ``job`` label kept as ``exported_job``."""
    samples: Dict[Labels, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            pairs = {("exported_job" if key == "job" else key): value for key, value in sample.labels.items()}
            pairs.update(__name__=sample.name, job="tasks", instance=instance)
            samples[frozenset(pairs.items())] = sample.value
    return samples


def firing(expr: str, before: Samples, now: Samples, seconds: float = 60.0) -> Set[str]:
    """The ``exported_job`` of each series ``expr`` gives at ``now``."""
    result = Evaluator(before, now, seconds).evaluate(expr)
    assert isinstance(result, dict), expr
    return {dict(key).get("exported_job", "?") for key in result}


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_each_rule_fires_on_a_real_exposition_for_its_job_only(make_cron: MakeCron) -> None:
    """Real instances, instrumented, on a memory store whose clock the test moves forward: a job
    overdue, a job whose last run failed, a lease fenced, a takeover 20 s after the lease ran out
    and one after 0.3 s. Scraped before and after: each rule fires for its job alone, and none
    fires on the first scrape alone (no increase yet)."""
    offset = [0]
    store = MemoryStore(clock=lambda: time.time_ns() // 1_000_000 + offset[0])
    registry = CollectorRegistry()
    # a started instance whose run is fenced: lease_lost_total{cause="fenced"}
    a = make_cron("a", store=store, catch_up_ms=CATCH_UP_HOUR)
    rec, calls = waiting_on_its_signal(a, "lease")
    # an instance never started, knowing the other jobs (their series exist at 0 from instrument)
    b = make_cron("b", store=store, max_late_ms=LATE_MS)
    for name in ("nightly", "report", "fine", "sync", "quick"):
        b.add_job(lambda: None, DAILY, name=name)
    instrument(a, registry=registry)
    instrument(b, registry=registry)
    today = b.store.now_ms() - b.store.now_ms() % DAY_MS
    if b.store.now_ms() - today < 60_000:
        today -= DAY_MS  # within a minute after midnight: today's slot is not due long enough yet
    for job, slot, status in (("nightly", today - DAY_MS, "success"),  # today's slot missed
                              ("report", today - DAY_MS, "success"), ("report", today, "failed"),
                              ("fine", today - DAY_MS, "success"), ("fine", today, "failed"),
                              ("fine", today + 1, "success")):  # fmt: skip
        ended(store, job, slot, status)
        offset[0] += 1_000  # each run ends a second after the one before
    first = stored_as_prometheus_does(generate_latest(registry).decode())

    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    fence(store, ctx)
    rec.wait("lost", timeout=3)
    a.stop(timeout=2)
    for job, waited_ms in (("sync", 20_000), ("quick", 300)):
        slot = today + 1
        dead = dead_claim(store, job, slot, 100)
        assert b.store.claim(job, slot, runner="b", reason="takeover").outcome == "running"  # seen by b
        offset[0] += waited_ms
        threading.Event().wait(0.11)  # the lease of 100 ms has run out on any clock
        assert b.store.claim(job, slot, runner="b", reason="takeover").outcome == "won"
        assert store.get_run(job, slot).started_ms - dead.lease_end_ms >= waited_ms  # type: ignore[union-attr]
    second = stored_as_prometheus_does(generate_latest(registry).decode())

    expected = {"LeaseCronJobOverdue": {"nightly"}, "LeaseCronJobFailing": {"report"},
                "LeaseCronLeaseLost": {"lease"}, "LeaseCronSlowTakeover": {"sync"}}  # fmt: skip
    found = rules()
    assert sorted(found) == sorted(expected)
    for name, (expr, _) in found.items():
        assert firing(expr, first, second) == expected[name], name
    alone = {name: firing(expr, first, first) for name, (expr, _) in found.items()}
    assert alone == {"LeaseCronJobOverdue": {"nightly"}, "LeaseCronJobFailing": {"report"},
                     "LeaseCronLeaseLost": set(), "LeaseCronSlowTakeover": set()}  # fmt: skip


def test_the_evaluator_can_fail() -> None:
    """The evaluator reads what it is given: a comparison that holds for none is empty, one with
    a label matcher selects only its series, and an expression it cannot read is an error."""
    from tests.contrib.promql_subset import labels

    now = {labels("m", exported_job="a", status="x"): 1.0, labels("m", exported_job="b", status="y"): 5.0}
    assert firing("max by (exported_job) (m) > 9", now, now) == set()
    assert firing('m{status="y"} > 0', now, now) == {"b"}
    assert firing("max by (exported_job) (m) > 1", now, now) == {"b"}
    with pytest.raises(AssertionError):
        firing("m > on(x) 1", now, now)


# -- the promtool unit tests ---------------------------------------------------------------------


def _series(text: str) -> Labels:
    name, _, rest = text.partition("{")
    pairs = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return frozenset({**pairs, "__name__": name}.items())


def _values(text: str) -> List[Optional[float]]:
    out: List[Optional[float]] = []
    for item in text.split():
        if item == "_":
            out.append(None)
        elif "x" in item:
            value, times = item.split("x")
            out.extend([float(value)] * (int(times) + 1))
        else:
            out.append(float(item))
    return out


def unit_tests() -> Tuple[Dict[Labels, List[Optional[float]]], List[Tuple[int, str, Set[str]]]]:
    """alerts_test.yml: its input series (a value a minute; None: no sample), and each alert test:
    the minute, the alert and the exported_job of each alert expected."""
    text = UNIT_TESTS.read_text()
    series = {_series(s): _values(v) for s, v in re.findall(r"- series: '(.+)'\n\s+values: '(.+)'", text)}
    cases = []
    for minute, alert, body in re.findall(r"- eval_time: (\d+)m\n\s+alertname: (\w+)\n\s+exp_alerts:(.*?)(?=\n\s+- "
                                          r"eval_time|\Z)", text, re.S):  # fmt: skip
        cases.append((int(minute), alert, set(re.findall(r"exported_job: (\w+)", body))))
    return series, cases


def _at(series: Dict[Labels, List[Optional[float]]], minute: int, first: bool) -> Vector:
    """Each series' sample at ``minute`` (the latest within 5 minutes), or its first up to then."""
    out: Vector = {}
    for key, values in series.items():
        known = [(m, v) for m, v in enumerate(values[: minute + 1]) if v is not None and minute - m <= 5]
        if known:
            out[key] = known[0][1] if first else known[-1][1]
    return out


def test_the_promtool_unit_tests_agree_with_the_evaluator() -> None:
    """Each case of alerts_test.yml, evaluated here: at its minute the alert fires (its expression
    held at every evaluation of the last ``for`` minutes) for the jobs it expects, and only them."""
    series, cases = unit_tests()
    found = rules()
    assert {alert for _, alert, _ in cases} == set(found)
    for minute, alert, expected in cases:
        expr, wait = found[alert]
        held = [firing(expr, _at(series, m, True), _at(series, m, False)) for m in range(minute - wait, minute + 1)]
        assert set.intersection(*held) == expected, (alert, minute)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_test_rules() -> None:
    """``promtool test rules alerts_test.yml`` passes (where promtool is installed)."""
    done = subprocess.run(["promtool", "test", "rules", "alerts_test.yml"], cwd=EXAMPLE, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(["promtool", "check", "rules", "alerts.yml"], cwd=EXAMPLE, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
