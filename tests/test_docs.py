"""The examples in the docs are real: each `$ regdev call ...` block gives the output shown."""

from __future__ import annotations

import re
import shlex

import pytest

from conftest import ROOT
from regdev._cli import main

EXAMPLE = re.compile(r"^\$ regdev (call .*)\n(\{.*\})$", re.MULTILINE)


def examples(name: str) -> list[tuple[str, str]]:
    return EXAMPLE.findall((ROOT / "docs" / name).read_text(encoding="utf-8"))


def test_errors_doc_has_an_example_for_every_validation_code() -> None:
    """docs/errors.md shows each parse and validate code at least once."""
    shown = " ".join(output for _, output in examples("errors.md"))
    for code in ("not-json", "not-an-object", "missing-tool", "bad-arguments", "wrong-tool",
                 "unknown-tool", "missing-addr", "unknown-argument", "type-addr", "type-data",
                 "range-addr", "range-data"):
        assert f'"code":"{code}"' in shown, code


@pytest.mark.parametrize(("command", "expected"), examples("errors.md"))
def test_errors_doc_example(capsys: pytest.CaptureFixture[str], command: str,
                            expected: str) -> None:
    """The documented output is what regdev prints."""
    main(shlex.split(command))
    assert capsys.readouterr().out.strip() == expected


RUNNABLE = re.compile(r"^<!-- runs in tests/test_docs.py -->\n```python\n(.*?)^```$",
                      re.MULTILINE | re.DOTALL)


def runnable_blocks(name: str) -> list[str]:
    return RUNNABLE.findall((ROOT / name).read_text(encoding="utf-8"))


def test_readme_has_runnable_python_examples() -> None:
    """The README's provider-format example is marked to run here."""
    assert len(runnable_blocks("README.md")) >= 1


@pytest.mark.parametrize("block", runnable_blocks("README.md"))
def test_readme_python_example_runs_and_prints_what_it_shows(
        capsys: pytest.CaptureFixture[str], block: str) -> None:
    """A marked README block runs, and each print() prints the comment line under it."""
    exec(compile(block, "README.md", "exec"), {})
    lines = block.splitlines()
    shown = [lines[i + 1].removeprefix("# ") for i, line in enumerate(lines[:-1])
             if line.startswith("print(") and lines[i + 1].startswith("# ")]
    assert capsys.readouterr().out.splitlines() == shown
