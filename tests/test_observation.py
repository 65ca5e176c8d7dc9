"""Observations: one JSON object per call, whose success and refusal can never disagree."""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest

from regdev import Observation, Refusal, mcp_result
from regdev.core._observation import CODES, refuse

REFUSAL = Refusal("validate", "range-addr", "addr 16 is outside 0..15")


def test_ok_cannot_be_given_apart_from_the_refusal() -> None:
    """`ok` is derived: Observation(ok=False) is a TypeError, not an observation saying true."""
    with pytest.raises(TypeError):
        Observation(ok=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Observation(ok=True, refusal=REFUSAL)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "observation",
    [Observation.success("read_register", {"addr": 3, "data": 7}),
     Observation.refused(REFUSAL, "c1"),
     Observation("write_register", {"addr": 3, "data": 7}, refusal=REFUSAL),
     Observation(refusal=REFUSAL, replay=True)],
)
def test_every_view_of_an_observation_says_the_same(observation: Observation) -> None:
    """.ok, to_dict(), to_json() and the MCP isError agree, whatever was constructed."""
    failed = observation.refusal is not None
    shown = observation.to_dict()
    assert observation.ok is (not failed) is shown["ok"]
    assert msgspec.json.decode(observation.to_json())["ok"] is shown["ok"]
    result = mcp_result(observation)
    assert result["isError"] is failed and result["structuredContent"]["ok"] is (not failed)
    assert ("code" in shown) is failed and ("tool" in shown) is (not failed)


def test_from_dict_rebuilds_what_to_dict_gave() -> None:
    """A stored observation comes back equal, replay flag and id included."""
    for observation in (Observation.success("read_register", {"addr": 1, "data": 2}, "x"),
                        Observation(refusal=REFUSAL, id="y", replay=True)):
        assert Observation.from_dict(observation.to_dict()) == observation


def test_no_refusal_in_the_source_spells_its_stage() -> None:
    """Every refusal in src/ is built from the table of codes (refuse(), or the compiled
    check's stage looked up in it): no call of Refusal names a stage as a string literal,
    which could disagree with the table."""
    source = Path(__file__).resolve().parent.parent / "src" / "regdev"
    found = []
    for path in sorted(source.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("Refusal", "_Refusal") and node.args
                    and isinstance(node.args[0], ast.Constant)):
                found.append(f"{path.relative_to(source)}:{node.lineno}")
    assert found == []


def test_a_refusal_built_from_the_table_takes_its_stage_and_retryable_from_it() -> None:
    """refuse() takes a code's stage from the table, needs one for a code given at several
    stages, and refuses a code the table lacks; retryable reads the same table."""
    assert refuse("range-addr", "m") == Refusal("validate", "range-addr", "m")
    assert refuse("denied-write_register", "m").stage == "authorize"
    assert refuse("missing-", "m").stage == "validate"  # a property may be named ""
    assert refuse("audit-error", "m", "execute") == Refusal("execute", "audit-error", "m")
    with pytest.raises(ValueError, match="name the stage"):
        refuse("audit-error", "m")
    with pytest.raises(ValueError, match="not given at parse"):
        refuse("range-addr", "m", "parse")
    with pytest.raises(ValueError, match="not a verdict code"):
        refuse("no-such-code", "m")
    assert [code for code, entry in CODES.items()
            if Refusal(entry.stages[0], code, "").retryable is not entry.retryable] == []
    assert (refuse("denied-x", "m").retryable, refuse("type-x", "m").retryable) == (False, True)
