"""The scripted model every framework adapter's test drives: after each refused call, the
corrected call (so the run recovers from every mistake on its first retry), and the checks on
what the gate recorded. Verdicts are those the gate gives the same raw text in process."""

from __future__ import annotations

from pathlib import Path

from regdev import AuditRecord, Gate, read_audit
from regdev.audit._report import adherence

#: (tool name, arguments text as the model writes it, the verdict expected).
MISTAKES = [
    ("write_register", '{"addr": "3", "data": 1}', "type-addr"),
    ("write_register", '{"addr": 3, "data": 1, "note": "x"}', "unknown-argument"),
    ("write_register", '{"addr": 3, "data": 1, "addr": 4}', "not-json"),
    ("write_register", '{"addr": 3, "data": 300}', "range-data"),
    ("write_register", '{"addr": 3, "da', "not-json"),
    ("write_register", '{"addr": 3, "data": 3.0000000000000001}', "type-data"),
    ("functions.write_register", '{"addr": 3, "data": 1}', "unknown-tool"),
]
#: The corrected call after each mistake.
FIX = ("write_register", '{"addr": 3, "data": 1}', None)


def script(skip_names: tuple[str, ...] = ()) -> list[tuple[str, str, str | None]]:
    """Each mistake followed by its fix (mistakes whose tool name is in ``skip_names`` left
    out: a framework that never hands them to a tool)."""
    calls: list[tuple[str, str, str | None]] = []
    for mistake in MISTAKES:
        if mistake[0] not in skip_names:
            calls += [mistake, FIX]
    return calls


def in_process(name: str, text: str) -> str | None:
    """The verdict a fresh gate gives the same raw text as a canonical call."""
    return Gate().handle(f'{{"tool": "{name}", "arguments": {text}}}').code


def check_run(db: Path, calls: list[tuple[str, str, str | None]], proposer: str,
              *, raw: bool = True) -> list[AuditRecord]:
    """Every call recorded, in order, with the verdict the gate gives its raw text in
    process, one loop, steps 1..n, the proposer; the report's first-try validity is 0 and
    every mistake recovered on its first retry."""
    records = [r for r in read_audit(db) if r.event == "call"]
    assert [r.code for r in records] == [code for _, _, code in calls]
    for record, (name, text, code) in zip(records, calls, strict=True):
        assert in_process(name, text) == code
        assert record.proposer == proposer, (record.proposer, record.code, record.step)
        if raw and code != "unknown-tool":
            assert record.raw == text.encode()
    assert len({r.loop_id for r in records}) == 1 and records[0].loop_id
    steps = [r.step for r in records]
    assert steps == sorted(steps) and steps[0] >= 0
    (report,) = adherence(read_audit(db))
    assert report.first_tries == len(calls) // 2
    assert report.first_try_valid == 0
    assert report.episodes == len(calls) // 2
    assert dict(report.recovered) == {1: len(calls) // 2}
    return records
