"""The examples in the docs are real: each `$ regdev call ...` line gives the output shown,
and each Python block marked to run prints what its comments show.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest

from conftest import ROOT
from regdev import REGISTER_TOOLS, ReferenceValidator, ToolSet, map_tools
from regdev.agents._shell import shell_tools
from regdev.cli._main import main
from regdev.core._observation import CODES, FIXED_CODES, NAMED, NAMED_CODES, code_entry
from regdev.devices._rdl import load_map

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
        status = main(shlex.split(command))
        out, err = capsys.readouterr()
        # a call's status is 0 or 1; 2 (a usage or audit-log error) says why on stderr
        assert (status in (0, 1), out.strip()) == (True, expected), (command, status, err)


RUNNABLE = re.compile(r"^<!-- runs in tests/test_docs.py -->\n```python\n(.*?)^```$",
                      re.MULTILINE | re.DOTALL)


def runnable_blocks(name: str) -> list[str]:
    return RUNNABLE.findall((ROOT / name).read_text(encoding="utf-8"))


#: The pages whose marked Python blocks run here.
RUNNABLE_PAGES = ("README.md", "docs/agents.md", "docs/errors.md")


def test_readme_has_runnable_python_examples() -> None:
    """The README's example, docs/agents.md's From Python and provider-format examples and
    the errors doc's key example run here."""
    assert len(runnable_blocks("README.md")) >= 1
    assert len(runnable_blocks("docs/agents.md")) >= 2
    assert len(runnable_blocks("docs/errors.md")) >= 1


@pytest.mark.parametrize(("name", "block"), [
    (name, block) for name in RUNNABLE_PAGES for block in runnable_blocks(name)])
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


def test_errors_doc_matches_the_table_of_codes() -> None:
    """docs/errors.md and the table of codes say the same: each code (and each family of
    named codes) is a heading under its first stage's section, and each code heading of a
    stage's section is a code of the table."""
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    documented: dict[str, str] = {}  # heading -> its stage section
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        stage = section.split("\n", 1)[0].strip()
        for code in re.findall(r"^### `([a-z<>-]+)`$", section, re.MULTILINE):
            documented[code] = stage
    table = {code: entry.stages[0] for code, entry in CODES.items()}
    table |= {f"{kind}-<{'tool' if kind == 'denied' else 'arg'}>": entry.stages[0]
              for kind, entry in NAMED.items()}
    assert documented == table


#: Options a command takes whose row in docs/cli.md's table may leave them out: --help, and
#: those common to every command that runs calls (the paragraph below the table names them).
_SHARED_OPTIONS = {"-h", "--help", "--map", "--port", "--timeout", "--baud", "--policy",
                   "--session", "--audit", "--no-audit", "--durability"}


def _command_rows() -> dict[str, list[str]]:
    """docs/cli.md's command table: command -> the synopses of its rows."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## Commands", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, list[str]] = {}
    for synopsis in re.findall(r"^\| `regdev ([^`]*)` \|", section, re.MULTILINE):
        rows.setdefault(synopsis.split()[0], []).append(synopsis.replace("\\|", "|"))
    return rows


def test_the_command_table_matches_the_commands() -> None:
    """Every command has a row in docs/cli.md's table; every option a row shows is one the
    command takes; and every option of report and bench (the ones whose rows fell behind)
    is shown."""
    from regdev.cli._main import build_parser  # noqa: PLC0415

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    commands: dict[str, object] = dict(sub.choices)  # type: ignore[arg-type]
    rows = _command_rows()
    assert set(rows) == set(commands)
    for name, synopses in rows.items():
        if name == "firmware-sim":  # its own parser (the simulator's), checked below
            taken = set(re.findall(r"(?<![\w-])-{1,2}[a-zA-Z][\w-]*",
                                   _help(["firmware-sim", "--help"])))
        else:
            parser = commands[name]
            taken = {o for a in parser._actions for o in a.option_strings}  # type: ignore[attr-defined]
        for synopsis in synopses:
            shown = set(re.findall(r"(?<![\w-])-{1,2}[a-zA-Z][\w-]*", synopsis))
            assert shown <= taken, (name, shown - taken)
        if name in ("report", "bench", "audit"):
            shown_all = {o for s in synopses for o in re.findall(r"-{1,2}[a-z][\w-]*", s)}
            assert taken - _SHARED_OPTIONS <= shown_all, (name, taken - shown_all)


def test_docs_cli_shows_every_option_of_audit() -> None:
    """docs/cli.md's section on `regdev audit` gives the command's synopsis with every option
    its parser takes (--caller included), and names each filter in its text."""
    from regdev.cli._main import build_parser  # noqa: PLC0415

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices["audit"]  # type: ignore[index]
    taken = {o for a in parser._actions for o in a.option_strings} - {"-h", "--help"}
    section = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split(
        "## `regdev audit`", 1)[1].split("\n## ", 1)[0]
    synopsis = section.split("`regdev audit ", 1)[1].split("`", 1)[0]
    assert set(re.findall(r"-{1,2}[a-z][\w-]*", synopsis)) == taken
    text = section.split("Filters combine", 1)[1]
    assert {o for o in taken if o not in ("--db", "--json")} <= set(
        re.findall(r"-{1,2}[a-z][\w-]*", text))


def _help(argv: list[str]) -> str:
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(argv)
    return out.getvalue()


def test_every_benchmark_script_is_in_the_benchmarks_readme() -> None:
    """benchmarks/README.md's table names how to run every script in benchmarks/ (the
    modules named with a leading underscore are helpers, not scripts); and the audit
    target the scripts print is the one the docs state as the goal."""
    table = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")
                     if not p.name.startswith("_"))
    assert [name for name in scripts if f"benchmarks/{name}" not in table] == []
    printed = (ROOT / "benchmarks" / "audit_throughput.py").read_text(encoding="utf-8")
    assert '">= 0.85"' in printed
    safety = (ROOT / "docs" / "safety.md").read_text(encoding="utf-8")
    assert "of SQLite's rate; target 0.85" in safety
    assert "The goal for sequential writes is **0.85**" in table


def test_the_stdio_table_says_which_requests_the_server_sends() -> None:
    """docs/agents.md: the stdio server sends requests of its own (approval questions), so a
    response from the client is one's answer; the table must not say it sends none."""
    page = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    assert "the server sends no requests" not in page
    assert "the server's only requests are its approval questions, `elicitation/create`" in page


#: A refusal with a code written out in regdev's source: ``refuse("code"`` or
#: ``refuse(f"kind-{...}"``, ``Refusal("stage", "code"``, and the reference benchmark's
#: ``refused("code"``.
SOURCE_CODE = re.compile(r'(?:Refusal\(\s*"[a-z]+",|refuse\(|refused\()\s*f?"([a-z-]+)')
#: A refusal that spells its stage: ``Refusal("stage", "code"`` (stage and code).
SPELLED_STAGE = re.compile(r'Refusal\(\s*"([a-z]+)",\s*f?"([a-z-]+)')


def test_every_code_regdevs_source_gives_is_a_fixed_or_named_code() -> None:
    """FIXED_CODES (what the docs test below and replay check against) holds every code a
    refusal is made with in regdev's source; the others are the named families."""
    found = set()
    for path in (ROOT / "src" / "regdev").rglob("*.py"):
        found.update(SOURCE_CODE.findall(path.read_text(encoding="utf-8")))
    named = tuple(f"{kind}-" for kind in NAMED_CODES)
    assert len(found) > 20
    assert [code for code in found if code not in FIXED_CODES and not code.startswith(named)
            ] == []


def test_every_refusal_that_spells_its_stage_names_a_stage_the_table_gives() -> None:
    """A refusal written out as ``Refusal("stage", "code", ...)`` names one of the stages the
    table of codes gives its code (``refuse`` takes the stage from the table)."""
    found = []
    for path in (ROOT / "src" / "regdev").rglob("*.py"):
        for stage, code in SPELLED_STAGE.findall(path.read_text(encoding="utf-8")):
            entry = code_entry(code + "x" if code.endswith("-") else code)
            found.append((path.name, code, stage, entry is not None and stage in entry.stages))
    assert [spelled for spelled in found if not spelled[3]] == []


def _errors_sections() -> dict[str, set[str]]:
    """docs/errors.md: each stage's section (``## parse`` ...) -> the codes it has a
    ``### `code``` heading for."""
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    sections: dict[str, set[str]] = {}
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        stage = part.split("\n", 1)[0].strip()
        sections[stage] = set(re.findall(r"^### `([a-z<>-]+)`$", part, re.MULTILINE))
    return sections


def test_errors_doc_has_each_code_of_the_table_under_its_first_stage() -> None:
    """Each code of the table has its section in docs/errors.md under the first stage the
    table gives it, and the page has a section for no code the table lacks."""
    sections = _errors_sections()
    wanted = {(entry.stages[0], code) for code, entry in CODES.items()}
    wanted |= {(entry.stages[0], f"{kind}-<{'tool' if kind == 'denied' else 'arg'}>")
               for kind, entry in NAMED.items()}
    documented = {(stage, code) for stage, codes in sections.items() for code in codes}
    assert documented == wanted


#: An observation of a refusal shown in docs/errors.md (one line of JSON).
REFUSED = re.compile(r'\{"ok": ?false,[^\n]*\}')


def test_errors_doc_examples_show_the_stage_and_retryable_the_table_gives() -> None:
    """Every refusal shown in docs/errors.md names a stage the table gives its code and says
    ``retryable`` as the table does."""
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    shown = [json.loads(line) for line in REFUSED.findall(text)]
    assert len(shown) > 30
    wrong = []
    for observation in shown:
        entry = code_entry(observation["code"])
        if entry is None or observation["stage"] not in entry.stages \
                or observation["retryable"] is not entry.retryable:
            wrong.append(observation)
    assert wrong == []


def _argument_codes(tools: ToolSet) -> set[str]:
    """Every code the reference validator (whose codes the gate's compiled check gives) can
    refuse a call to ``tools`` with for its arguments, and the scope code of each tool:
    ``missing-`` each required argument, ``type-`` each place with a type, ``range-`` each
    place with a bound, ``denied-`` each tool."""
    reference = ReferenceValidator(tools)
    codes = set()
    for name in tools:
        codes.add(f"denied-{name}")
        levels: list[Any] = [reference.level(name)]
        while levels:
            level = levels.pop()
            codes.update(f"missing-{level.label + '.' if level.label else ''}{required}"
                         for required in level.required)
            nodes = list(level.fields.values())
            while nodes:
                node = nodes.pop()
                if node.types is not None or node.schema is False:
                    codes.add(f"type-{node.label}")
                if node.ranged:
                    codes.add(f"range-{node.label}")
                if node.level is not None:
                    levels.append(node.level)
                nodes.extend(node.prefix)
                nodes.extend([node.items] if node.items is not None else [])
    return codes


def test_errors_doc_names_every_code_of_regdevs_own_tools() -> None:
    """Each code a call to regdev's tools can get (the register tools, the tools of a register
    map, the shell's) is written out in docs/errors.md, not only as ``range-<arg>``."""
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([a-z_.\[\]-]+)`", text))
    sensor = map_tools(load_map(ROOT / "examples" / "sensor.rdl"))
    codes = FIXED_CODES.union(*(_argument_codes(tools) for tools in (
        REGISTER_TOOLS, sensor, shell_tools(), shell_tools(tools=sensor))))
    assert "range-field" in codes and "type-data[]" in codes
    assert sorted(codes - documented) == []
