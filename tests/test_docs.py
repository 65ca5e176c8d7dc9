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
