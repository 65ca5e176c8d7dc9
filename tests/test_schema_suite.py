"""The official JSON Schema Test Suite (draft 2020-12) against the compiled validator.

Each test group's schema becomes the schema of one required argument ``v`` of a tool whose
input schema is closed (``additionalProperties: false``), and each test's data is sent as
``{"v": data}``. A group whose schema stays inside the supported subset must give every
test's validity (and the reference must give the same code); a group using any other keyword
must be refused at compile time with a SchemaError that points at that keyword. The files are
copies of ``../shared/peer-tests/json-schema-test-suite`` (the object, number and string
keywords) and ``../shared/peer-tests/json-schema-test-suite-arrays`` (arrays, counts of
properties, multipleOf), one commit of the suite (see their COMMIT and LICENSE), so CI on a
clean clone runs them too. The exact counts are pinned so the suite cannot shrink quietly.
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import ROOT, SHARED, shared_missing, summary_line
from regdev import ReferenceValidator, SchemaError, ToolSet, compile_validator
from regdev.gate._schema import ANNOTATION_KEYWORDS, VALIDATION_KEYWORDS

#: The copies in the repository, each beside the shared folder it was copied from.
COPIES = ("json-schema-test-suite", "json-schema-test-suite-arrays")
DATA = ROOT / "tests" / "data"
PEER_TESTS = SHARED / "peer-tests"
FILES = sorted(path for copy in COPIES for path in (DATA / copy / "draft2020-12").glob("*.json"))

#: The parser's decoding (fractions and exponents as Decimal), and Python's json module's
#: (floats): a Python caller may hand either to the validator.
DECODERS = {
    "decimal": msgspec.json.Decoder(float_hook=Decimal).decode,
    "float": json.loads,
}


def _tool(schema: Any) -> list[dict[str, Any]]:
    return [{"name": "t", "inputSchema": {"type": "object", "properties": {"v": schema},
                                          "required": ["v"], "additionalProperties": False}}]


def _unsupported(schema: Any) -> set[str]:
    """Every keyword in a schema (at any depth) that is outside the supported subset."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for keyword, value in schema.items():
            if keyword not in VALIDATION_KEYWORDS | ANNOTATION_KEYWORDS:
                found.add(keyword)
            elif keyword == "properties":
                for sub in value.values():
                    found |= _unsupported(sub)
            elif keyword == "items":
                found |= _unsupported(value)
            elif keyword == "prefixItems":
                for sub in value:
                    found |= _unsupported(sub)
            elif keyword == "additionalProperties" and not isinstance(value, bool):
                found.add(keyword)  # only true and false are in the subset
    return found


def written(number: Any) -> Fraction:
    """A number's exact value, a float by its repr: the decimal the suite wrote."""
    return Fraction(repr(number)) if type(number) is float else Fraction(number)


def _exact_multiple_of(schema: dict[str, Any], data: Any) -> bool:
    """The validity of a multipleOf group's case by the exact values of the decoded numbers
    (``fractions.Fraction``: no float or Decimal division; a float by its repr, as regdev
    takes it), the schema's ``type`` included."""
    if type(data) is bool or not isinstance(data, (int, float, Decimal)):
        return schema.get("type") != "integer"
    quotient = written(data) / written(schema["multipleOf"])
    integral = written(data).denominator == 1
    return quotient.denominator == 1 and (integral or schema.get("type") != "integer")


def run_suite(decode: Any) -> dict[str, int]:
    """Run every group; return the counts (and fail on the first wrong answer).

    A multipleOf case is held to its validity by exact arithmetic on the numbers as decoded
    (a float by its repr, the decimal the suite wrote, as regdev takes it): that is the
    suite's answer, with decimals and with floats alike (counted otherwise as
    ``oracle_differs``, which must stay 0).
    """
    counts = {"groups": 0, "refused_groups": 0, "cases": 0, "refused_cases": 0,
              "oracle_differs": 0}
    for path in FILES:
        for group in decode(path.read_bytes()):
            counts["groups"] += 1
            where = f"{path.name}: {group['description']}"
            tools = _tool(group["schema"])
            unsupported = _unsupported(group["schema"])
            try:
                check = compile_validator(tools)
            except SchemaError as error:
                assert unsupported, f"{where}: refused but inside the subset: {error}"
                keyword = error.pointer.rsplit("/", 1)[-1]
                assert keyword in unsupported, f"{where}: refused for {error}"
                counts["refused_groups"] += 1
                counts["refused_cases"] += len(group["tests"])
                continue
            assert not unsupported, f"{where}: compiled despite {unsupported}"
            reference = ReferenceValidator(ToolSet.from_definitions(tools))
            for test in group["tests"]:
                call = {"tool": "t", "arguments": {"v": test["data"]}}
                code = check(call)
                expected = test["valid"]
                if path.name == "multipleOf.json":
                    exact = _exact_multiple_of(group["schema"], test["data"])
                    if exact != expected:
                        counts["oracle_differs"] += 1
                        expected = exact
                assert (code is None) == expected, (
                    f"{where}: {test['description']}: got {code}\n{check.source}")
                assert reference(call) == code, f"{where}: {test['description']}"
                counts["cases"] += 1
    return counts


@pytest.mark.parametrize("decoding", list(DECODERS))
def test_json_schema_test_suite(decoding: str, request: pytest.FixtureRequest) -> None:
    """Every supported case gets its validity; every other group is refused at compile time."""
    counts = run_suite(DECODERS[decoding])
    summary_line(request, f"JSON Schema Test Suite, numbers as {decoding}: {counts['cases']} "
                 f"cases ran in {counts['groups'] - counts['refused_groups']} groups; "
                 f"{counts['refused_groups']} groups ({counts['refused_cases']} cases) "
                 "refused at compile time")
    assert counts == {"groups": 105, "refused_groups": 11, "cases": 416, "refused_cases": 36,
                      "oracle_differs": 0}


@pytest.mark.skipif(not PEER_TESTS.exists(), reason=shared_missing(PEER_TESTS))
@pytest.mark.parametrize("copy", COPIES)
def test_suite_copy_matches_shared(copy: str) -> None:
    """Each copy under tests/data is its shared folder, file for file."""
    ours = {p.relative_to(DATA / copy): p.read_bytes()
            for p in (DATA / copy).rglob("*") if p.is_file()}
    theirs = {p.relative_to(PEER_TESTS / copy): p.read_bytes()
              for p in (PEER_TESTS / copy).rglob("*") if p.is_file()}
    assert ours == theirs


def test_suite_is_present() -> None:
    """The suite's files, licence and commit are in the repository: one commit for both."""
    assert len(FILES) == 13 + 7
    commits = {(DATA / copy / "COMMIT").read_text().strip() for copy in COPIES}
    assert len(commits) == 1 and len(commits.pop()) == 40
    assert all((DATA / copy / "LICENSE").read_text().startswith("Copyright") for copy in COPIES)
    assert all(isinstance(json.loads(Path(p).read_text()), list) for p in FILES)
