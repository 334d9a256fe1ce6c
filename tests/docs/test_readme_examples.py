"""Every example block of the README is a file the test suite runs, character for character."""

from __future__ import annotations

import pytest

from tests.docs.readme_examples import README, ROOT, docs_includes, readme_examples


def test_marked_blocks_are_parsed() -> None:
    """The parser finds a marked block, its language line and options skipped, and refuses a marker without one."""
    text = ".. example: a.py\n\n.. code-block:: python\n   :caption: x\n\n    x = 1\n\n    y = 2\n\nprose\n"
    assert readme_examples(text) == {"a.py": "x = 1\n\ny = 2\n"}
    with pytest.raises(ValueError, match="not followed by a code block"):
        readme_examples(".. example: b.py\n\nprose\n")


EXAMPLES = readme_examples(README.read_text(encoding="utf-8"))


def test_the_readme_shows_examples() -> None:
    """The README has marked examples at all (a broken marker syntax must not make the next test vacuous)."""
    assert "examples/quickstart.py" in EXAMPLES, sorted(EXAMPLES)


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_readme_block_is_the_file_the_tests_run(path: str) -> None:
    """The README block equals the example file (which another test runs)."""
    file = ROOT / path
    assert file.is_file(), f"README shows {path}, which does not exist"
    assert EXAMPLES[path] == file.read_text(encoding="utf-8"), f"README block differs from {path}"


def test_every_example_file_is_shown_in_the_readme_or_the_docs() -> None:
    """Each file under examples/ is a README block, or included whole by a page of docs/
    (``.. literalinclude::``): no example is tested that readers cannot see."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*") if p.is_file())
    files = [f for f in files if "__pycache__" not in f]
    included = {path for path in docs_includes() if path.startswith("examples/")}
    assert files and sorted(set(EXAMPLES) | included) == files


def test_the_docs_include_only_files_that_exist() -> None:
    """Every ``literalinclude`` of docs/ names a file (Sphinx would only warn; the site test fails then)."""
    missing = {path: page for path, page in docs_includes().items() if not (ROOT / path).is_file()}
    assert docs_includes() and not missing, missing
