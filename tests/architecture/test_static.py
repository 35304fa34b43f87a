"""Static checks that fail fast where a test run would not reach: pyflakes over every
Python file of the project (a name used but never imported, an import nothing uses, an
f-string with no field). The rooms move once lost an import in the peers benchmark's
pair mode, which no test decodes; this finds that class of slip in any module."""

from __future__ import annotations

from pathlib import Path

from pyflakes.api import checkRecursive
from pyflakes.reporter import Reporter

REPO = Path(__file__).resolve().parents[2]
CHECKED = ("stagedspec", "experiments", "analysis", "tests")


class _Collect(Reporter):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def unexpectedError(self, filename, message) -> None:
        self.messages.append(f"{filename}: {message}")

    def syntaxError(self, filename, message, lineno, offset, text) -> None:
        self.messages.append(f"{filename}:{lineno}: {message}")

    def flake(self, message) -> None:
        self.messages.append(str(message))


def test_pyflakes_finds_nothing():
    report = _Collect()
    checkRecursive([str(REPO / d) for d in CHECKED], report)
    assert report.messages == [], "\n".join(report.messages)


def test_pyflakes_catches_a_missing_import(tmp_path):
    """The check can fail: a module that uses a name it never imported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def main():\n    return load_prompt_set('humaneval')\n")
    report = _Collect()
    checkRecursive([str(bad)], report)
    assert len(report.messages) == 1 and "undefined name 'load_prompt_set'" in report.messages[0]
