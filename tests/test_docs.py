"""The examples in the docs are real: each `$ regdev call ...` line gives the output shown,
and each Python block marked to run prints what its comments show.
"""

from __future__ import annotations

import re
import shlex

import pytest

from conftest import ROOT
from regdev.cli._main import main
from regdev.core._observation import FIXED_CODES, NAMED_CODES

EXAMPLE = re.compile(r"^\$ regdev (call .*)\n(\{.*\})$", re.MULTILINE)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(name: str) -> list[list[tuple[str, str]]]:
    """The example blocks of a doc: each a list of ``(command, expected output)``."""
    text = (ROOT / "docs" / name).read_text(encoding="utf-8")
    found = [EXAMPLE.findall(block) for lang, block in FENCE.findall(text) if not lang]
    return [block for block in found if block]


def test_errors_doc_has_an_example_for_every_code_a_call_can_show() -> None:
    """docs/errors.md shows each parse, validate and authorize code that one call can get."""
    shown = " ".join(output for block in blocks("errors.md") for _, output in block)
    shown += " ".join(runnable_blocks("docs/errors.md"))
    for code in ("not-json", "not-an-object", "missing-tool", "bad-arguments", "wrong-tool",
                 "unknown-tool", "missing-addr", "unknown-argument", "type-addr", "type-data",
                 "range-addr", "range-data", "bad-idempotency-key", "denied-write_register",
                 "read-only-register", "idempotency-conflict", "approval-denied"):
        assert f'"code":"{code}"' in shown, code


@pytest.mark.parametrize("block", blocks("errors.md"),
                         ids=lambda block: block[-1][0][:60])
def test_errors_doc_example(capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch,
                            block: list[tuple[str, str]]) -> None:
    """The documented output is what regdev prints (paths relative to the repository)."""
    monkeypatch.chdir(ROOT)
    for command, expected in block:
        main(shlex.split(command))
        assert capsys.readouterr().out.strip() == expected, command


RUNNABLE = re.compile(r"^<!-- runs in tests/test_docs.py -->\n```python\n(.*?)^```$",
                      re.MULTILINE | re.DOTALL)


def runnable_blocks(name: str) -> list[str]:
    return RUNNABLE.findall((ROOT / name).read_text(encoding="utf-8"))


def test_readme_has_runnable_python_examples() -> None:
    """The README's From Python and provider-format examples and the errors doc's key
    example run here."""
    assert len(runnable_blocks("README.md")) >= 2
    assert len(runnable_blocks("docs/errors.md")) >= 1


@pytest.mark.parametrize(("name", "block"), [
    (name, block) for name in ("README.md", "docs/errors.md") for block in runnable_blocks(name)])
def test_python_example_runs_and_prints_what_it_shows(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str,
        block: str) -> None:
    """A marked block runs from the clone's root (as a reader would), and each print()
    prints the comment line under it."""
    monkeypatch.chdir(ROOT)
    exec(compile(block, name, "exec"), {})
    lines = [line.strip() for line in block.splitlines()]
    shown = [lines[i + 1].removeprefix("# ") for i, line in enumerate(lines[:-1])
             if line.startswith("print(") and lines[i + 1].startswith("# ")]
    assert capsys.readouterr().out.splitlines() == shown


def test_errors_doc_has_a_section_for_every_fixed_code() -> None:
    """Each code of FIXED_CODES (the list replay checks `expect` against) is documented."""
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^### `([a-z<>-]+)`$", text, re.MULTILINE))
    named = {f"{kind}-<{'tool' if kind == 'denied' else 'arg'}>" for kind in NAMED_CODES}
    assert headings >= FIXED_CODES | named
