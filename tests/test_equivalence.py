"""Compiled vs reference validator, and both vs the jsonschema package, on generated inputs."""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import jsonschema
from hypothesis import given, note, settings
from hypothesis import strategies as st

from regdev import REGISTER_TOOLS, ReferenceValidator, ToolSet, compile_validator
from regdev.bench._bench import BLOCK_WRITE
from regdev.gate._compile import BIND, RefusalCheck, compile_refusals
from support.strategies import (
    array_tool_calls,
    block_calls,
    python_calls,
    register_calls,
    schemas_and_calls,
    tool_choices,
)

compiled = compile_validator()
reference = ReferenceValidator()
refusals = compile_refusals()


def _same_refusal(reference: ReferenceValidator, code: str | None, call: Any,
                  choice: str | None) -> None:
    """The reference's full check gives ``code``, and explain() words it the same way."""
    refusal = reference.check(call, choice)
    assert (refusal.code if refusal is not None else None) == code
    if code is not None:
        assert reference.explain(call, code, choice) == refusal


def _worded_as_reference(check: RefusalCheck, tools: ToolSet, call: Any,
                         choice: str | None) -> None:
    """The gate's compiled check (refusals worded in it) gives the very refusal the reference's
    full check gives; on a valid call it says BIND exactly when Tool.bind would change the
    arguments (None: bind would return them as they are)."""
    verdict = check(call, choice)
    expected = check.reference.check(call, choice)
    if verdict is None or verdict is BIND:
        assert expected is None, expected
        arguments = call["arguments"]
        bound = tools[call["tool"]].bind(arguments)
        if verdict is None:
            assert bound is arguments
    else:
        assert verdict == expected


@given(register_calls(), tool_choices)
def test_register_tools_compiled_equals_reference(call: Any, choice: str | None) -> None:
    """On calls biased to every edge, the compiled validator returns the reference's code,
    and the reference explains that code with the refusal its own check gives; the gate's
    compiled check words the same refusal itself."""
    code = compiled(call, tool_choice=choice)
    _same_refusal(reference, code, call, choice)
    _worded_as_reference(refusals, REGISTER_TOOLS, call, choice)


@given(python_calls(), st.sampled_from([None, "write_register"]))
def test_gate_check_words_python_data_as_the_reference(call: Any, choice: str | None) -> None:
    """Python values that are not JSON data: the gate's compiled check gives the reference's
    refusal (its helpers show any value), never an exception."""
    _worded_as_reference(refusals, REGISTER_TOOLS, call, choice)


block_tools = ToolSet([BLOCK_WRITE])
block_compiled = compile_validator(block_tools)
block_reference = ReferenceValidator(block_tools)
block_refusals = compile_refusals(block_tools)


@given(block_calls(), st.sampled_from([None, None, "write_registers", "write_register"]))
def test_block_writes_compiled_equals_reference(call: Any, choice: str | None) -> None:
    """write_registers(addr, data) with 0 to 17 values at every edge: the same code, and the
    reference explains it with the refusal its own check gives."""
    _same_refusal(block_reference, block_compiled(call, tool_choice=choice), call, choice)
    _worded_as_reference(block_refusals, block_tools, call, choice)


def _finite(value: object) -> bool:
    """A JSON number: int (not bool), or a finite float or Decimal."""
    if isinstance(value, bool):
        return False
    if isinstance(value, Decimal):
        return value.is_finite()
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _exact_integer(checker: Any, value: object) -> bool:
    """JSON Schema's integer, told apart without regdev's helpers: a whole-number ratio."""
    return _finite(value) and (isinstance(value, int)
                               or value.as_integer_ratio()[1] == 1)  # type: ignore[attr-defined]


def _finite_number(checker: Any, value: object) -> bool:
    return _finite(value)


# jsonschema's draft 2020-12 validator counts a Decimal as a number but never as an integer
# (its integer check is int or float.is_integer()); the parser decodes 3.0 and 1e2 to Decimal,
# so both types are redefined to the draft's words: integer is "a number with a zero
# fractional part", and a number is finite (JSON has no NaN or Infinity).
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"integer": _exact_integer, "number": _finite_number})


def _written(number: Any) -> Fraction:
    """A number's exact value as a fraction, a float by its repr (the decimal JSON text said)."""
    return Fraction(repr(number)) if type(number) is float else Fraction(number)


def _multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """multipleOf by exact rationals, a float taken by its shortest decimal (``repr``), as
    regdev does. jsonschema divides a float in floating point, and takes a Decimal ``%`` that
    raises past 28 digits of quotient; the draft asks for the exact value ("the result of the
    division is an integer")."""
    if validator.is_type(instance, "number") and (
            _written(instance) / _written(divisor)).denominator != 1:
        yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {divisor!r}")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """uniqueItems by jsonschema's own JSON equality, pair by pair. Its ``uniq`` sorts first
    and compares neighbours only, which misses ``[[1], [true], [1]]`` ([1] and [true] sort
    as equal and sit between the two [1])."""
    if unique and validator.is_type(instance, "array") and any(
            jsonschema._utils.equal(instance[i], instance[j])
            for j in range(len(instance)) for i in range(j)):
        yield jsonschema.ValidationError(f"{instance!r} has non-unique elements")


JsonSchemaValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, type_checker=_TYPES,
    validators={"multipleOf": _multiple_of, "uniqueItems": _unique_items})


def _as_written(value: Any) -> Any:
    """``value`` with each finite float made the decimal its repr writes (what JSON text said),
    as regdev reads a float, in lists and objects too; the rest as it is."""
    if type(value) is float and math.isfinite(value):
        return Decimal(repr(value))
    if type(value) is list:
        return [_as_written(item) for item in value]
    if type(value) is dict:
        return {key: _as_written(item) for key, item in value.items()}
    return value


def _peer_valid(tools: list[dict[str, Any]], call: Any, choice: str | None) -> bool:
    """The call's validity as jsonschema sees it (shape and name checked here, by the rules)."""
    if type(call) is not dict or type(call.get("tool")) is not str:
        return False
    if type(call.get("arguments")) is not dict:
        return False
    if choice is not None and call["tool"] != choice:
        return False
    schema = next((t["inputSchema"] for t in tools if t["name"] == call["tool"]), None)
    # a float, in the schema or the call, is the decimal its repr writes, as regdev reads it
    return schema is not None and JsonSchemaValidator(_as_written(schema)).is_valid(
        _as_written(call["arguments"]))


def _all_agree(case: tuple[list[dict[str, Any]], Any, str | None]) -> None:
    tools, call, choice = case
    check = compile_validator(tools)
    note(check.source)
    code = check(call, tool_choice=choice)
    tool_set = ToolSet.from_definitions(tools)
    _same_refusal(ReferenceValidator(tool_set), code, call, choice)
    assert (code is None) == _peer_valid(tools, call, choice)
    gate_check = compile_refusals(tool_set)
    note(gate_check.source)
    _worded_as_reference(gate_check, tool_set, call, choice)


@given(array_tool_calls())
def test_array_schemas_compiled_equals_reference_and_jsonschema(
        case: tuple[list[dict[str, Any]], Any, str | None]) -> None:
    """Arrays of leaves, objects and arrays, element by element: the reference's code and
    message, and jsonschema's validity."""
    _all_agree(case)


@given(schemas_and_calls())
def test_random_schemas_compiled_equals_reference_and_jsonschema(
        case: tuple[list[dict[str, Any]], Any, str | None]) -> None:
    """Random schemas from the subset: same code as the reference, same validity as jsonschema,
    and explain(call, code) is the reference's own refusal."""
    _all_agree(case)


# (100 examples, not the profile's 300: the random schemas' agreement is the test above's, at
# 300; here it is the lookup by dict past the inline limit, the same draws padded)
@settings(max_examples=100)
@given(st.lists(schemas_and_calls(), min_size=1, max_size=1), st.integers(5, 9))
def test_many_tools_dispatch_by_dict(cases: list[Any], count: int) -> None:
    """Past the inline limit the name is looked up in a dict; the codes stay the same."""
    tools, call, choice = cases[0]
    padded = tools + [{"name": f"pad{i}", "inputSchema": {"type": "object"}}
                      for i in range(count)]
    check = compile_validator(padded)
    assert "_TOOLS.get(name)" in check.source
    note(check.source)
    tool_set = ToolSet.from_definitions(padded)
    _same_refusal(ReferenceValidator(tool_set), check(call, tool_choice=choice), call, choice)
    gate_check = compile_refusals(tool_set)
    assert "_TOOLS.get(name)" in gate_check.source
    _worded_as_reference(gate_check, tool_set, call, choice)
