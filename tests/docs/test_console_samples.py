"""What the docs show commands and the log printing is what they print today.

* Each console session of the docs (a literal block of ``$ leasecron ...``
  lines, each followed by what it printed) is run for real, command after
  command, as processes on a SQLite store that holds what the page's story
  says (:data:`STORIES`), in a zone that reads ``CET`` as the pages do; each
  command's output must be the lines the page shows, compared by
  :func:`tests.docs.samples.shape` (numbers, durations, padding, a store's
  repr and the actor folded; a line ``...`` stands for lines left out).
* Each log line the docs show (``INFO     leasecron: ...``) is one of the
  templates the package logs with, read from its source.
* Each ``leasecron VERB`` the docs give names a command, and each of its
  options is one that command takes.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, ContextManager, Dict, Iterator, List, Set, Tuple

import pytest

from leasecron import Context, LeaseCron, Run, Store, open_store
from leasecron.announcements import announcement_of
from leasecron.cli import verbs
from tests.docs.readme_examples import DOCS, README, ROOT
from tests.helpers import wait_for
from tests.docs.samples import assert_shows, inline_literals, joined_options, literal_blocks, sessions

FIVE_MIN = 300_000
#: max_late_ms of the stories' own claims of earlier slots (never refused as late).
NEVER_LATE = 10**10
#: The pages' local times read CET: a POSIX zone that is CET all year.
ZONE = "CET-1"

Story = Callable[[Path], ContextManager[Dict[str, str]]]


def _won(store: Store, job: str, slot_ms: int, runner: str, reason: str = "schedule") -> Run:
    """A claim the story needs won; its run (a lease of 60 s)."""
    answer = store.claim(
        job, slot_ms, runner=runner, reason=reason, lease_ms=60_000, max_late_ms=NEVER_LATE, overlap="allow"
    )
    assert answer.won and answer.run is not None, (job, slot_ms, answer)
    return answer.run


def _ended(store: Store, run: Run, status: str = "success", error: "str | None" = None) -> None:
    assert store.finish(run.job, run.slot_ms, run.token, status, error)


@contextmanager
def runs_story(tmp_path: Path) -> Iterator[Dict[str, str]]:
    """docs/operating.rst's ``runs``: three slots of ``report`` (a success on web-1-4242, a failure on
    web-2-977, and the latest handed over by web-3-1201 and running as attempt 2 on web-1-4242) and a
    ``cleanup`` that succeeded. The page's Redis URL stands for the story's SQLite file."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    with open_store(url) as store:
        slot = store.now_ms() // FIVE_MIN * FIVE_MIN
        _ended(store, _won(store, "report", slot - 2 * FIVE_MIN, "web-1-4242"))
        error = "ConnectionError: smtp.internal:25: connection refused"
        _ended(store, _won(store, "report", slot - FIVE_MIN, "web-2-977"), "failed", error)
        _ended(store, _won(store, "cleanup", slot - FIVE_MIN, "web-2-977"))
        stopped = _won(store, "report", slot, "web-3-1201")
        assert store.release("report", slot, stopped.token)
        _won(store, "report", slot, "web-1-4242", reason="takeover")
    yield {"redis://redis.internal:6379/0": url}


#: The app of docs/operating.rst's ``jobs --app tasks:cron``: ``report`` with a time limit and retries.
TASKS = '''"""The app the docs' ``leasecron jobs --app tasks:cron`` reads."""
import leasecron

cron = leasecron.LeaseCron({url!r})


@cron.job("*/5 * * * *", name="report", timeout_ms=600_000, retries=3, retry_delay_ms=2_000)
def report(ctx: leasecron.Context) -> None:
    pass
'''


@contextmanager
def jobs_story(tmp_path: Path) -> Iterator[Dict[str, str]]:
    """docs/operating.rst's ``jobs --app tasks:cron``: an app whose ``report`` has a time limit and
    retries, and three successful runs of it in the store, the latest on web-1-4242."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    (tmp_path / "tasks.py").write_text(TASKS.format(url=url), encoding="utf-8")
    with open_store(url) as store:
        slot = store.now_ms() // FIVE_MIN * FIVE_MIN
        for back, runner in ((2, "web-2-977"), (1, "web-2-977"), (0, "web-1-4242")):
            _ended(store, _won(store, "report", slot - back * FIVE_MIN, runner))
    yield {}


@contextmanager
def controls_story(tmp_path: Path) -> Iterator[Dict[str, str]]:
    """docs/usage.rst's pause, jobs, trigger --wait, resume and show: ``report`` ran last on web-2-977,
    and an instance ``web-1`` runs it (a handler of 0.3 s) and polls for manual runs every 100 ms;
    it has no slot due during the test (so only the triggered run runs) and catches nothing up."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    with open_store(url) as store:
        _ended(store, _won(store, "report", store.now_ms() // FIVE_MIN * FIVE_MIN, "web-2-977"))
    cron = LeaseCron(url, runner="web-1", poll_ms=100, catch_up_ms=0, jitter_ms=0)

    @cron.job("0 0 1 1 *", name="report")
    def report(ctx: Context) -> None:
        threading.Event().wait(0.3)

    cron.start()
    try:
        yield {}
    finally:
        cron.stop(timeout=5)
        cron.store.close()


@contextmanager
def schedules_story(tmp_path: Path) -> Iterator[Dict[str, str]]:
    """docs/schedules.rst's reschedule, put, jobs, delete and reset: ``report`` (a job in code, no
    instance started) ran last on web-1-4242; the store holds no schedule yet."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    with open_store(url) as store:
        _ended(store, _won(store, "report", store.now_ms() // FIVE_MIN * FIVE_MIN, "web-1-4242"))
    yield {}


@contextmanager
def instances_story(tmp_path: Path) -> Iterator[Dict[str, str]]:
    """docs/operating.rst's ``instances``: web-1-4242 and web-2-977 announced themselves (the same
    code: ``report`` every 5 minutes, ``tick`` every 30 s, the task ``send_report``), web-1 first.
    The page's Redis URL stands for the story's SQLite file."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    jobs = [("report", "*/5 * * * *", "UTC"), ("tick", "30", "UTC")]
    with open_store(url) as store:
        for runner, host, pid in (("web-1-4242", "web-1", 4242), ("web-2-977", "web-2", 977)):
            store.announce(announcement_of(runner, host, pid, "0.3.0", jobs, ["send_report"]))
            started = store.now_ms()
            while store.now_ms() == started:  # the second starts later
                pass
    yield {"redis://cache:6379/0": url}


@contextmanager
def returns_story(tmp_path: Path) -> Iterator[Dict[str, str]]:
    """docs/operating.rst's ``runs`` and ``show`` of work done, recorded as not done (rule 26): the
    05:00 ``report`` on web-1-4242 lost its lease after its handler returned success (recorded
    afterwards), and the next slot's run on web-2-977, which had started, superseded it. The page's Redis
    URL stands for the story's SQLite file, its slot for the story's."""
    url = f"sqlite:///{tmp_path / 'leasecron.db'}"
    with open_store(url) as store:
        slot = store.now_ms() // FIVE_MIN * FIVE_MIN - FIVE_MIN
        lost = store.claim("report", slot, runner="web-1-4242", lease_ms=30, max_late_ms=NEVER_LATE).run
        assert lost is not None
        wait_for(lambda: store.now_ms() > lost.lease_end_ms, message="the lease did not run out")
        _ended(store, _won(store, "report", slot + FIVE_MIN, "web-2-977"))
        assert store.claim("report", slot, runner="web-2-977", reason="takeover").outcome == "done"
        assert store.record_return("report", slot, 1, "web-1-4242", lost.started_ms + 3, "success")
    yield {"redis://redis.internal:6379/0": url, "2026-12-04T05:00:00Z": str(slot)}


#: (page, the first command of a session) -> the story its store must tell.
STORIES: Dict[Tuple[str, str], Story] = {
    ("operating.rst", "leasecron runs redis://redis.internal:6379/0"): runs_story,
    ("operating.rst", "leasecron jobs --app tasks:cron"): jobs_story,
    ("operating.rst", "leasecron instances redis://cache:6379/0"): instances_story,
    ("operating.rst", "leasecron runs redis://redis.internal:6379/0 --job report"): returns_story,
    ("usage.rst", 'leasecron pause sqlite:///leasecron.db report --note "vendor API down"'): controls_story,
    ("schedules.rst", 'leasecron reschedule sqlite:///leasecron.db report "*/10 * * * *" --tz Europe/Berlin'):
        schedules_story,
}  # fmt: skip


#: Sessions another test holds: a server runs until it is stopped, so its start-up line is checked
#: against the command's own tests (tests/contrib/dashboard/test_api_docs.py).
CHECKED_ELSEWHERE = {("dashboard.rst", "leasecron dashboard sqlite:///leasecron.db --app tasks:cron --read-only")}


def all_sessions() -> Dict[Tuple[str, str], Tuple[int, List[Tuple[str, List[str]]]]]:
    """Every console session of the docs, by (page, first command)."""
    found = {}
    for page in sorted(path.name for path in DOCS.glob("*.rst")):
        for number, steps in sessions(page):
            found[(page, steps[0][0])] = (number, steps)
    return found


def test_every_session_of_the_docs_has_a_story() -> None:
    """A new console sample in the docs gets a story here (or it would rot unseen), and no story is
    left without its sample."""
    assert set(all_sessions()) == set(STORIES) | CHECKED_ELSEWHERE


@pytest.mark.timeout(120)
@pytest.mark.parametrize("key", sorted(STORIES), ids=lambda key: f"{key[0]}:{key[1].split()[1]}")
def test_each_command_of_the_session_prints_what_the_page_shows(key: Tuple[str, str], tmp_path: Path) -> None:
    """The session's commands, run in order on the story's store, print the lines the page shows."""
    page = key[0]
    number, steps = all_sessions()[key]
    env = {**os.environ, "TZ": ZONE}
    with STORIES[key](tmp_path) as replacements:
        for command, shown in steps:
            for sample, real in replacements.items():
                command = command.replace(sample, real)
            args = shlex.split(command, comments=True)
            result = subprocess.run(
                [sys.executable, "-m", "leasecron", *args[1:]],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            where = f"docs/{page}:{number}: $ {command}"
            assert result.returncode == 0, f"{where} exited {result.returncode}: {result.stdout}{result.stderr}"
            replacements.update(assert_shows(shown, result.stdout.splitlines(), where))


# -- log lines ------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[rsdif]")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _pattern(template: str) -> str:
    """A regular expression for the messages a ``%``-template formats."""
    parts = []
    for index, piece in enumerate(_PLACEHOLDER.split(template)):
        if index:
            kind = _PLACEHOLDER.findall(template)[index - 1][-1]
            parts.append({"d": r"[-+]?\d+", "i": r"[-+]?\d+", "f": r"[-+]?\d+(?:\.\d+)?"}.get(kind, ".+?"))
        parts.append(re.escape(piece))
    return "".join(parts)


def log_templates() -> List[str]:
    """The patterns of every log template of the package: each string constant that begins with
    ``leasecron: `` and holds a placeholder and words of its own (not ``leasecron: %s``)."""
    found = []
    for path in sorted((ROOT / "leasecron").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            text = node.value
            words = re.findall(r"[a-z]{2,}", _PLACEHOLDER.sub("", text)[len("leasecron: "):])
            if text.startswith("leasecron: ") and _PLACEHOLDER.search(text) and words:
                found.append(_pattern(text))
    return found


def documented_log_lines() -> List[Tuple[str, str]]:
    """``(page, message)`` of each log line a literal block of the docs shows (``LEVEL  leasecron: ...``)."""
    found = []
    for page in sorted(path.name for path in DOCS.glob("*.rst")):
        for _, block in literal_blocks(page):
            for text in block:
                level, _, message = text.partition(" ")
                if level in _LEVELS and message.strip().startswith("leasecron: "):
                    found.append((page, message.strip()))
    return found


def test_each_log_line_the_docs_show_is_one_the_package_logs() -> None:
    """Every log line of the docs' samples is formatted by one of the package's templates."""
    templates = log_templates()
    lines = documented_log_lines()
    assert len(templates) >= 40 and len(lines) >= 10, (len(templates), lines)
    unknown = [(page, line) for page, line in lines if not any(re.fullmatch(t, line) for t in templates)]
    assert not unknown, f"log lines the docs show that no template of the package makes: {unknown}"


def test_the_template_reader_tells_a_real_line_from_a_renamed_one() -> None:
    """The check above can fail: a real line matches, the same line with its verb changed does not."""
    templates = log_templates()
    real = "leasecron: won job 'report' slot 2026-11-30T05:00:00Z attempt 1 runner 'web-1' (schedule)"
    assert any(re.fullmatch(t, real) for t in templates)
    assert not any(re.fullmatch(t, real.replace(" won ", " claimed and won ")) for t in templates)


# -- commands and their options ---------------------------------------------------------------

_VERB = re.compile(r"^(?:\$ )?leasecron ([a-z][\w-]*)(.*)")


def cli_options() -> Dict[str, Set[str]]:
    """Each command of ``leasecron`` and the options it takes."""
    return {
        verb: {option for action in command._actions for option in action.option_strings}
        for verb, (_, command) in verbs().items()
    }


def documented_cli() -> List[Tuple[str, str, Set[str]]]:
    """(page, command, options) of each ``leasecron VERB ...`` the README and the docs give, as an
    inline literal or a line of a literal block."""
    found = []
    for page in [README, *sorted(DOCS.glob("*.rst"))]:
        pieces = inline_literals(page.read_text(encoding="utf-8"))
        pieces += [line for _, block in literal_blocks(page) for line in joined_options(block)]
        for piece in pieces:
            match = _VERB.match(piece.strip())
            if match:
                found.append((page.name, match.group(1), set(re.findall(r"--[\w-]+", match.group(2)))))
    return found


def test_each_command_the_docs_give_exists_with_its_options() -> None:
    """``leasecron runs URL [--job NAME]``, ``leasecron dashboard ... --read-only`` and the rest: the
    command exists and takes every option the docs give it."""
    options = cli_options()
    given = documented_cli()
    assert {"runs", "jobs", "trigger", "dashboard", "demo", "run"} <= {verb for _, verb, _ in given}, given
    wrong = [(page, verb, sorted(opts - options.get(verb, set()))) for page, verb, opts in given]
    wrong = [item for item in wrong if item[1] not in options or item[2]]
    assert not wrong, f"commands or options the docs give that leasecron does not have: {wrong}"
