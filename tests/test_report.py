"""regdev report: schema adherence per proposer, computed from the audit log."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import EXAMPLES
from regdev import AuditLog, Gate, read_audit
from regdev.audit._record import SCHEMA
from regdev.audit._report import adherence, format_report
from regdev.cli._main import main
from support.provider_server import ProviderServer, openai_turn

pytest.importorskip("openai", reason="the models extra (openai SDK) is not installed")


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def _agent(db: Path, model: str, replies: list, task: str = "task") -> int:
    with ProviderServer(replies) as server:
        return main(["agent", "--model", model, "--base-url", server.openai_url,
                     "--max-retries", "0", "--audit", str(db), "--json", task])


def test_two_models_figures_from_their_audit_records(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A clean model and a sloppy one: every figure of the report, checked by hand."""
    db = tmp_path / "audit.db"
    clean = [openai_turn([("a", "write_register", '{"addr": 1, "data": 5}')]),
             openai_turn([("b", "read_register", '{"addr": 1}')]),
             openai_turn(content="done")]
    sloppy = [openai_turn([("a", "write_register", '{"addr": "1", "data": 5}')]),  # type-addr
              openai_turn([("b", "write_register", '{"addr": 1, "data": 5}')]),     # retry ok
              openai_turn([("c", "read_register", '{"addr": 1, "x": 0}'),           # unknown
                           ("d", "read_register", '{"addr": 1}')]),                 # parallel
              openai_turn([("e", "read_register", "{addr: 1}")]),                   # not-json
              openai_turn(content="never reached")]
    assert _agent(db, "clean", clean) == 0
    assert _agent(db, "sloppy", sloppy) == 1
    capsys.readouterr()
    assert main(["report", "--db", str(db), "--json"]) == 0
    figures = {p["proposer"]: p for p in json.loads(capsys.readouterr().out)["proposers"]}
    assert set(figures) == {"openai:clean", "openai:sloppy"}
    clean_f, sloppy_f = figures["openai:clean"], figures["openai:sloppy"]
    assert (clean_f["calls"], clean_f["accepted"], clean_f["first_try_validity"]) == (2, 2, 1.0)
    assert clean_f["stops"] == {"done": 1} and clean_f["proposals_per_accepted"] == 1.0
    # sloppy: 5 calls; refused type-addr, unknown-argument, not-json; accepted 2
    assert (sloppy_f["calls"], sloppy_f["accepted"], sloppy_f["refused"]) == (5, 2, 3)
    assert sloppy_f["codes"] == {"not-json": 1, "type-addr": 1, "unknown-argument": 1}
    assert sloppy_f["stages"] == {"parse": 1, "validate": 2}
    # first tries: call 1 (refused), call 3 (refused; after an accepted call), call 5
    # (not-json, after the accepted parallel read): calls 2 and 4 are retries
    assert (sloppy_f["first_tries"], sloppy_f["first_try_valid"]) == (3, 0)
    assert sloppy_f["episodes"] == 3
    assert sloppy_f["recovered_on_retry"] == {"1": 2}
    assert sloppy_f["recovery_rate"] == pytest.approx(2 / 3)
    assert sloppy_f["proposals_per_accepted"] == 2.5
    assert sloppy_f["stops"] == {"rejected": 1}
    assert main(["report", "--db", str(db), "--model", "openai:clean", "--json"]) == 0
    only = json.loads(capsys.readouterr().out)["proposers"]
    assert [p["proposer"] for p in only] == ["openai:clean"]


def test_report_of_a_replay_reproduces_replays_own_counts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev report` over the audit log of `regdev replay` of the wild cases gives the
    same calls, refusals by code and accepted count that replay printed."""
    db = tmp_path / "audit.db"
    assert main(["replay", str(EXAMPLES / "wild-calls.jsonl"), "--json", "--audit",
                 str(db)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    outcomes = [line for line in lines if "line" in line]
    assert main(["report", "--db", str(db), "--json"]) == 0
    (figures,) = json.loads(capsys.readouterr().out)["proposers"]
    codes: dict[str, int] = {}
    for observation in outcomes:
        if not observation["ok"]:
            codes[observation["code"]] = codes.get(observation["code"], 0) + 1
    assert figures["proposer"] == "replay:wild-calls.jsonl"
    assert figures["calls"] == len(outcomes) == 18
    assert figures["accepted"] == sum(o["ok"] for o in outcomes) == 2
    assert figures["codes"] == codes
    assert figures["first_tries"] == 18  # replayed calls belong to no loop


def test_text_report_escapes_proposer_names_and_counts(tmp_path: Path) -> None:
    """The text table shows a hostile proposer name escaped; the figures read as percentages."""
    db = tmp_path / "audit.db"
    with Gate(audit=AuditLog(db)) as gate:
        gate.handle('{"tool": "read_register", "arguments": {"addr": 1}}',
                    proposer="evil\n  fake-row 100%\x1b[2J")
        gate.handle('{"tool": "read_register", "arguments": {"addr": 99}}',
                    proposer="evil\n  fake-row 100%\x1b[2J")
    text = format_report(adherence(read_audit(db)))
    assert "\x1b" not in text and "evil\\n  fake-row 100%\\x1b[2J" in text
    row = text.splitlines()[2]
    assert row.split()[-5:] == ["1", "50%", "-", "2.00", "0"]
    assert "range-addr 1 (50% of calls); 1 in all" in text


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--plot draws the chart (a real PNG file) beside the text report."""
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    db = tmp_path / "audit.db"
    assert main(["replay", str(EXAMPLES / "wild-calls.jsonl"), "--audit", str(db)]) == 0
    png = tmp_path / "report.png"
    assert main(["report", "--db", str(db), "--plot", str(png)]) == 0
    assert f"chart written to {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_names_the_file_it_writes_and_refuses_what_it_cannot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--plot writes the file named, in its extension's format (PNG without one), and says
    so; a format matplotlib does not write, a directory, or a missing directory is one line,
    exit 2, before the audit log is read (the --db here does not exist); nothing is written."""
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    db = tmp_path / "audit.db"
    assert main(["replay", str(EXAMPLES / "wild-calls.jsonl"), "--audit", str(db)]) == 0
    capsys.readouterr()
    for name, magic in [("noext", b"\x89PNG"), ("chart.svg", b"<?xml"), ("chart.PDF", b"%PDF")]:
        target = tmp_path / name
        assert main(["report", "--db", str(db), "--plot", str(target)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == f"chart written to {target}"
        assert target.read_bytes()[:len(magic)] == magic
    assert not (tmp_path / "noext.png").exists()
    missing = str(tmp_path / "no-such.db")
    lines = []
    for target, words in [
        (tmp_path / "x.txt", "matplotlib cannot write .txt files; use one of "),
        (tmp_path, "is a directory"),
        (tmp_path / "nowhere" / "x.png", "does not exist"),
    ]:
        assert main(["report", "--db", missing, "--plot", str(target)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        [line] = captured.err.splitlines()
        assert line.startswith(f"regdev report: error: --plot {target}") and words in line
        lines.append(line)
    assert {"png", "svg", "pdf"} <= set(lines[0].split("use one of ")[1].split(", "))
    assert not (tmp_path / "x.txt").exists() and not (tmp_path / "nowhere").exists()
    assert not Path(f"{tmp_path}.png").exists()


def test_a_version_3_log_gets_the_device_and_proposer_columns(tmp_path: Path) -> None:
    """An audit log written before proposers were recorded is upgraded in place: its records
    read back with no proposer, new ones carry theirs."""
    db = tmp_path / "audit.db"
    old_schema = "\n".join(line for line in SCHEMA.splitlines()
                           if not line.lstrip().startswith(("proposer", "device")))
    old_schema = old_schema.replace("observe_ns INTEGER,", "observe_ns INTEGER")
    conn = sqlite3.connect(db)
    conn.executescript(old_schema + "PRAGMA user_version = 3;")
    conn.close()
    with Gate(audit=AuditLog(db)) as gate:
        gate.handle('{"tool": "read_register", "arguments": {"addr": 1}}', proposer="m:1")
    assert [r.proposer for r in read_audit(db)] == ["m:1"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5


def test_the_report_splits_by_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each call records its register map's name; regdev report --by map gives one row per
    proposer and map (the default map named as such); without --by map, one per proposer."""
    db = tmp_path / "audit.db"
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"raw": "{\\"tool\\": \\"read_register\\", \\"arguments\\": '
                     '{\\"addr\\": 1}}"}\n{"raw": "{\\"tool\\": \\"read_register\\", '
                     '\\"arguments\\": {\\"addr\\": 99}}"}\n')
    assert main(["replay", str(calls), "--audit", str(db), "--map",
                 str(EXAMPLES / "sensor.rdl")]) == 0
    assert main(["replay", str(calls), "--audit", str(db)]) == 0
    capsys.readouterr()
    assert [r.map_name for r in read_audit(db)] == ["sensor", "sensor", None, None]
    assert main(["report", "--db", str(db), "--by", "map", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["proposers"]
    assert [(r["proposer"], r["map"], r["calls"], r["codes"]) for r in rows] == [
        ("replay:calls.jsonl", None, 2, {"range-addr": 1}),
        ("replay:calls.jsonl", "sensor", 2, {"range-addr": 1})]
    assert main(["report", "--db", str(db), "--by", "map"]) == 0
    text = capsys.readouterr().out
    assert "replay:calls.jsonl on sensor" in text
    assert "replay:calls.jsonl on the default map" in text
    assert main(["report", "--db", str(db), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["proposers"]
    assert (row["calls"], "map" not in row) == (4, True)
