"""Parse: byte cap, strict JSON, exact numbers, and the four dialect adapters."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given, settings

from regdev import Gate, ParsedCall, Refusal, parse
from regdev.core._json import decode_strict, lenient_members, load_json, strict_value
from support.strategies import repeated_key_documents, to_json


def code(result: ParsedCall | Refusal) -> str | None:
    if isinstance(result, Refusal):
        return result.code
    return result.refusal.code if result.refusal else None


def test_canonical_call_with_id() -> None:
    """A canonical call is passed through and its string id is kept."""
    got = parse('{"tool": "read_register", "arguments": {"addr": 1}, "id": "c1"}')
    assert got == ParsedCall({"tool": "read_register", "arguments": {"addr": 1},
                              "id": "c1"}, "c1")


def test_bytes_and_str_agree() -> None:
    """UTF-8 bytes parse the same as the str."""
    text = '{"tool": "read_register", "arguments": {"addr": 1}}'
    assert parse(text) == parse(text.encode())


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": -Infinity}',
        '{"a": "x\ny"}',  # a raw control character inside a string
        '{"a": 1} {"a": 2}',  # trailing data
        '{"a": 1} x',
        '{"a": 1,}',
        "{'a': 1}",
        '{"a": 1',  # truncated
        "",
        "[" * 5000 + "]" * 5000,  # nested too deep
        '{"a": 0' + "1" * 5000 + "}",  # a leading zero
        "1" * 5000,  # past Python's 4300-digit limit for int()
        b'{"a": "\xff"}',  # invalid UTF-8
        '{"a": "\\ud800"}',  # a lone surrogate escape
        '{"a": "\ud800"}',  # a str holding a lone surrogate itself
        '{"a": "\ud800' + "x" * 20000 + '"}',  # the same, long enough to be encoded to count
        "\ufeff{}",  # a byte order mark
        '{"a": 1e9999999999999999999}',  # an exponent past what Decimal can hold
        '{"a": 0e9999999999999999999}',
        '{"tool": "t", "tool": "u", "arguments": {}}',  # duplicate keys, at every depth
        '{"tool": "t", "arguments": {"addr": 99, "addr": 1}}',
        '{"tool": "t", "arguments": {"x": [{"a": 1, "a": 2}]}}',
        '{"tool": "t:u", "arguments": {"a": "1:2", "a": 3}}',
    ],
)
def test_not_json(raw: str | bytes) -> None:
    """Everything that is not one strict JSON document is refused as not-json."""
    result = parse(raw)
    assert isinstance(result, Refusal)
    assert (result.stage, result.code) == ("parse", "not-json")
    assert "\n" not in result.message


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"a": "\\ud800"}', "invalid \\u escape \\ud800: a lone surrogate (half of a UTF-16 pair) "
                            "is not a character"),
        ('["\\ud83d\\ude00", "x\\uDBFFy"]', "invalid \\u escape \\uDBFF: a lone surrogate "
                                          "(half of a UTF-16 pair) is not a character"),
        ('{"a": "\\\\ud800", "b": "\\udc00"}', "invalid \\u escape \\udc00: a lone surrogate "
                                            "(half of a UTF-16 pair) is not a character"),
        ('{"a": ' + "7" * 5000 + "}", "an integer has more than 4300 digits, the most regdev "
                                      "reads (Python's limit for converting text to int)"),
        ('[[-' + "7" * 4301 + "]]", "an integer has more than 4300 digits, the most regdev "
                                    "reads (Python's limit for converting text to int)"),
        ("\ufeff{}", "a byte-order mark (U+FEFF) before the JSON is not allowed"),
        (b"\xef\xbb\xbf{}", "a byte-order mark (U+FEFF) before the JSON is not allowed"),
        ('{"a": 1', "the text ends at byte 7, before the JSON document does (a string, array or "
                    "object is not closed, or a value is missing)"),
        ("", "the input is empty"),
        (b"", "the input is empty"),
        (" \t\r\n ", "the input is empty"),
        (b"\n", "the input is empty"),
    ],
)
def test_not_json_messages_say_what_is_wrong(raw: str | bytes, reason: str) -> None:
    """A lone surrogate escape, an integer past the digit limit and a byte-order mark are
    named as such (not "truncated", a `$[...]` path or "invalid character (byte 0)")."""
    result = parse(raw)
    assert isinstance(result, Refusal)
    assert (result.code, result.message) == (
        "not-json", f"not one strict JSON document: {reason}; send one JSON object")


def test_too_large_checked_before_parsing() -> None:
    """Over the cap is too-large even when it is not JSON at all; at the cap it is parsed."""
    assert code(parse("x" * 101, max_bytes=100)) == "too-large"
    assert code(parse(b"x" * 101, max_bytes=100)) == "too-large"
    assert code(parse("x" * 100, max_bytes=100)) == "not-json"
    # the cap counts UTF-8 bytes, not characters: 40 x "é" is 80 bytes
    assert code(parse('"' + "é" * 40 + '"', max_bytes=81)) == "too-large"
    assert code(parse('"' + "é" * 40 + '"', max_bytes=82)) is None


def test_default_cap_is_64_kib() -> None:
    """The default cap is 65536 bytes."""
    padding = " " * (65536 - 2)
    assert code(parse("{}" + padding)) is None
    assert code(parse("{}" + padding + " ")) == "too-large"


def test_numbers_stay_exact() -> None:
    """Integers keep every digit; fractions and exponents become Decimal, never float."""
    got = parse('{"tool": "t", "arguments": {"a": 18446744073709551617, "b": 3.0, "c": 1e2,'
                ' "d": 0.1}}')
    assert isinstance(got, ParsedCall)
    args = got.call["arguments"]  # type: ignore[index]
    assert args["a"] == 2**64 + 1 and type(args["a"]) is int
    assert args["b"] == Decimal("3.0") and type(args["b"]) is Decimal
    assert args["c"] == 100 and type(args["c"]) is Decimal
    assert args["d"] == Decimal("0.1")


def test_non_object_documents_pass_to_the_shape_step() -> None:
    """A valid JSON document that is not an object is parsed, not judged, in every dialect."""
    for dialect in ("canonical", "mcp", "openai", "anthropic"):
        assert parse("[1, 2]", dialect) == ParsedCall([1, 2])
        assert parse('"x"', dialect) == ParsedCall("x")


def test_mcp_dialect() -> None:
    """MCP tools/call params: name and arguments."""
    got = parse('{"name": "read_register", "arguments": {"addr": 2}}', "mcp")
    assert got == ParsedCall({"tool": "read_register", "arguments": {"addr": 2}})


def test_mcp_absent_fields_stay_absent() -> None:
    """A missing name or arguments is left missing for the shape step to name."""
    assert parse('{"arguments": {}}', "mcp") == ParsedCall({"arguments": {}})
    assert parse('{"name": "x"}', "mcp") == ParsedCall({"tool": "x"})


def test_anthropic_dialect() -> None:
    """Anthropic tool_use blocks: name, input, and the id echoed (and used as the key)."""
    got = parse('{"type": "tool_use", "id": "toolu_1", "name": "read_register",'
                ' "input": {"addr": 2}}', "anthropic")
    assert got == ParsedCall({"tool": "read_register", "arguments": {"addr": 2}}, "toolu_1",
                             idempotency_key="toolu_1")


def test_openai_dialect_parses_argument_text() -> None:
    """OpenAI function calls carry arguments as JSON text, parsed with the same strictness."""
    raw = ('{"id": "call_1", "type": "function", "function": {"name": "write_register",'
           ' "arguments": "{\\"addr\\": 3, \\"data\\": 255}"}}')
    assert parse(raw, "openai") == ParsedCall(
        {"tool": "write_register", "arguments": {"addr": 3, "data": 255}}, "call_1",
        idempotency_key="call_1")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('"{\\"addr\\": 3,}"', "not-json"),
        ('"{\\"addr\\": NaN}"', "not-json"),
        ('""', "not-json"),
        ('{"addr": 3}', "bad-arguments"),
        ("null", "bad-arguments"),
    ],
)
def test_openai_argument_text_must_be_strict_json_text(arguments: str, expected: str) -> None:
    """Bad argument text is not-json; arguments that are not a string are bad-arguments."""
    raw = ('{"id": "call_9", "type": "function", '
           f'"function": {{"name": "t", "arguments": {arguments}}}}}')
    result = parse(raw, "openai")
    assert code(result) == expected
    assert isinstance(result, ParsedCall) and result.id == "call_9"  # kept for tool_call_id


def test_openai_without_a_name_leaves_arguments_to_the_shape_step() -> None:
    """No tool name: the arguments are not judged here, so missing-tool comes first."""
    raw = '{"id": "c", "type": "function", "function": {"arguments": 5}}'
    assert parse(raw, "openai") == ParsedCall({"arguments": 5}, "c", idempotency_key="c")


def test_duplicate_keys_are_found_past_colons_in_strings() -> None:
    """Colons inside strings do not hide a repeated key, nor flag a clean call."""
    clean = parse('{"tool": "a:b", "arguments": {"addr": "1:2"}, "id": "x:y"}')
    assert clean == ParsedCall({"tool": "a:b", "arguments": {"addr": "1:2"}, "id": "x:y"}, "x:y")
    dup = parse('{"tool": "a:b", "arguments": {"k:1": 1, "k:1": 2}}')
    assert isinstance(dup, Refusal) and 'key "k:1" appears twice' in dup.message


def test_long_ids_are_not_echoed() -> None:
    """A correlation id is at most 256 characters; a longer one is not echoed."""
    ok = parse('{"tool": "t", "arguments": {}, "id": "' + "x" * 256 + '"}')
    long = parse('{"tool": "t", "arguments": {}, "id": "' + "x" * 257 + '"}')
    assert isinstance(ok, ParsedCall) and ok.id == "x" * 256
    assert isinstance(long, ParsedCall) and long.id is None


def test_openai_double_encoded_arguments_stay_a_string() -> None:
    """Arguments text that decodes to a string is passed on as a string (shape refuses it)."""
    raw = '{"type": "function", "function": {"name": "t", "arguments": "\\"{}\\""}}'
    assert parse(raw, "openai") == ParsedCall({"tool": "t", "arguments": "{}"})


def test_openai_without_function_object() -> None:
    """No function object means no tool name."""
    assert parse('{"type": "function"}', "openai") == ParsedCall({})


def test_non_string_id_is_not_echoed() -> None:
    """Only a string id is a correlation id."""
    assert parse('{"tool": "t", "arguments": {}, "id": 5}') == ParsedCall(
        {"tool": "t", "arguments": {}, "id": 5}, None)


def test_unknown_dialect_is_a_programming_error() -> None:
    """The dialect is declared by the caller; a wrong one raises ValueError naming them all."""
    with pytest.raises(ValueError, match="canonical, mcp, openai, anthropic"):
        parse("{}", "gemini")


def test_non_text_input_is_refused() -> None:
    """A Python object that is not text is refused, not parsed."""
    assert code(parse(123)) == "not-json"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw",
    [
        # an escaped colon in a string must not hide a repeated key
        r'{"tool": "read_register", "tool": "write_register", "arguments": {}, "x": "\u003a"}',
        r'{"tool": "t", "arguments": {"a": 1, "a": 2, "b": "\u003A"}}',
        r'{"tool": "t", "arguments": {"k\u003a": 1, "k\u003a": 2}}',
        r'{"tool": "t", "arguments": {"deep": {"x": {"y": {"z": 1, "z": 2}}}}}',
    ],
)
def test_duplicate_keys_are_found_past_escaped_colons_and_at_any_depth(raw: str) -> None:
    """The fast duplicate-key check cannot be fooled by \\u003a, nor by depth."""
    for text in (raw, raw.encode()):
        result = parse(text)
        assert isinstance(result, Refusal) and "appears twice" in result.message


@pytest.mark.parametrize(
    "raw",
    [
        r'{"tool": "t", "arguments": {"a": "\u003a", "b\u003a": "::"}}',
        r'{"tool": "t", "arguments": {"a": "\\u003a"}}',  # a backslash, then the text u003a
        '{"tool": "t", "arguments": {"deep": {"x": {"y": [{"z": 1}, {"z": 2}]}}}}',
        '{"tool": "t", "arguments": {"n": 1.5, "big": 1e400, "s": "a:b"}}',
    ],
)
def test_clean_calls_pass_the_duplicate_key_check(raw: str) -> None:
    """Escapes, deep objects and Decimal numbers do not make a clean call look repeated."""
    for text in (raw, raw.encode()):
        result = parse(text)
        assert isinstance(result, ParsedCall), result


def test_canonical_fast_path_keeps_the_idempotency_key_and_id() -> None:
    """The inline canonical path and the adapter agree: id, key, and a bad key's refusal."""
    plain = parse('{"tool": "t", "arguments": {}, "id": "c1"}')
    keyed = parse('{"tool": "t", "arguments": {}, "id": "c1", "idempotency_key": "k1"}')
    bad = parse('{"tool": "t", "arguments": {}, "idempotency_key": 5}')
    assert plain == ParsedCall({"tool": "t", "arguments": {}, "id": "c1"}, "c1")
    assert isinstance(keyed, ParsedCall) and (keyed.id, keyed.idempotency_key) == ("c1", "k1")
    assert isinstance(bad, ParsedCall) and bad.refusal is not None
    assert bad.refusal.code == "bad-idempotency-key"


def test_deep_nesting_in_the_duplicate_key_scan_is_not_json(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """When the exact duplicate-key scan cannot follow the nesting, the call is refused."""

    def too_deep(*args: object, **kwargs: object) -> object:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(json, "loads", too_deep)
    # a text that only looks like an escaped colon sends the check to the exact scan
    raw = r'{"tool": "t", "arguments": {}, "x": {"a": {"b": "\\u003a"}}}'

    result = parse(raw)
    assert isinstance(result, Refusal)
    assert (result.code, result.message) == (
        "not-json", "not one strict JSON document: JSON is nested too deeply; send one JSON object")


# --- load_json: the one loader for the JSON files regdev reads --------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('[{"name": "t", "inputSchema": {"maximum": 15, "maximum": 255}}]',
         'key "maximum" appears twice in one object'),
        ('{"tools": [{"a": {"b": 1, "b": 1}}]}', 'key "b" appears twice in one object'),
        ('[[{"k\\u003a": 1, "k\\u003a": 2}]]', 'key "k:" appears twice in one object'),
        ('{"timeout": NaN}', r"NaN, at byte 12, is not a JSON number \(JSON has no NaN"),
        ('{"a": 1} {"a": 2}', "more text after the end of the JSON document, at byte 9"),
        ("[" * 5000 + "]" * 5000, "nested"),
        (b'{"a": "\xff"}', "invalid UTF-8: byte 7 is 0xFF"),
        ("\ufeff\ufeff{}", r"a byte-order mark \(U\+FEFF\) before the JSON"),  # one is skipped
    ],
)
def test_load_json_refuses_what_the_gate_refuses(text: str | bytes, reason: str) -> None:
    """A repeated key at any depth (inside arrays too), NaN, trailing data, deep nesting and
    invalid UTF-8 are a ValueError saying why, never a silent "last one wins"."""
    for data in (text, text.encode("utf-8", "surrogatepass")) if isinstance(text, str) \
            else (text,):
        with pytest.raises(ValueError, match="(?i)" + reason):
            load_json(data)


def test_load_json_counts_the_bytes_of_a_byte_order_mark_it_skips() -> None:
    """A file's byte N is the byte a message names, after a skipped byte-order mark too."""
    for data in (b"\xef\xbb\xbf{}x", "\ufeff{}x"):
        with pytest.raises(ValueError, match=r"more text after the end of the JSON document, "
                                             r"at byte 5\Z"):
            load_json(data)


def test_load_json_reads_numbers_exactly_and_skips_a_byte_order_mark() -> None:
    """Integers stay int, fractions and exponents are Decimal; a leading BOM is skipped."""
    text = '{"n": 18446744073709551617, "f": 1.1, "e": 1e2, "s": "a:b", "l": [{"a": 1}]}'
    expected = {"n": 2**64 + 1, "f": Decimal("1.1"), "e": Decimal("1e2"), "s": "a:b",
                "l": [{"a": 1}]}
    for data in (text, "\ufeff" + text, text.encode(), b"\xef\xbb\xbf" + text.encode()):
        got = load_json(data)
        assert got == expected and type(got["f"]) is Decimal and type(got["n"]) is int
    assert load_json("[]") == [] and load_json("3") == 3


# --- parse decides first, inside arrays too -----------------------------------------------

DIALECT_NAMES = ("canonical", "mcp", "openai", "anthropic")


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ('[{"tool": "read_register", "tool": "x", "arguments": {"addr": 1}}]', "tool"),
        ('[1, [{"arguments": {"addr": 1, "addr": 2}}]]', "addr"),
        ('[{"a": [{"b": {"c": 1, "\\u0063": 2}}]}]', "c"),
        ('[[], {"name": "read_register", "name": "write_register"}]', "name"),
        ('[{"k:1": 1, "k\\u003a1": 2}]', "k:1"),
    ],
)
def test_a_repeated_key_inside_an_array_is_not_json_before_the_shape(raw: str, key: str) -> None:
    """A document that is an array holding an object with a repeated key is not-json in every
    dialect, as str and as bytes: parse decides before the shape step says not-an-object."""
    for dialect in DIALECT_NAMES:
        for text in (raw, raw.encode()):
            result = parse(text, dialect)
            assert isinstance(result, Refusal), (dialect, text)
            assert (result.stage, result.code) == ("parse", "not-json")
            assert f'key "{key}" appears twice in one object' in result.message
    assert Gate().handle(raw).code == "not-json"


#: One gate for every example below: it refuses them before anything is kept (and making
#: one per example was most of the test's time).
_GATE = Gate()


# (100 examples, not the profile's 300: the strategy's drawing is most of the time, and the
# shapes it draws are also pinned case by case in the test above)
@settings(max_examples=100)
@given(repeated_key_documents())
def test_a_key_repeated_anywhere_is_not_json_in_every_dialect(case: tuple[str, str]) -> None:
    """Whatever the nesting (arrays, objects) and however each occurrence is spelled (plain,
    \\u escapes), a repeated key is not-json naming the key, in every dialect, in the gate and
    in load_json; the same document with the repeat dropped is never refused for it."""
    text, key = case
    named = 'appears twice in one object'
    for dialect in DIALECT_NAMES:
        for raw in (text, text.encode()):
            result = parse(raw, dialect)
            assert isinstance(result, Refusal), (dialect, raw)
            assert result.code == "not-json" and named in result.message
            if key.isascii() and key.isprintable():
                assert f'key "{key}"' in result.message
    assert _GATE.handle(text).code == "not-json"
    with pytest.raises(ValueError, match=named):
        load_json(text)
    # inside OpenAI's function.arguments (JSON text in a string) too
    wrapped = to_json({"type": "function", "function": {"name": "t", "arguments": text}})
    refusal = parse(wrapped, "openai")
    assert isinstance(refusal, ParsedCall) and refusal.refusal is not None
    assert refusal.refusal.code == "not-json" and named in refusal.refusal.message
    # the control: the same document as a parser that keeps the last value reads it
    clean = to_json(json.loads(text, parse_float=Decimal))
    kept = parse(clean)
    assert not (isinstance(kept, Refusal) and named in kept.message)


def test_one_strict_decoder_serves_the_parser_the_files_and_the_mcp_reader() -> None:
    """core/_json.py decides for all: a repeated key in bytes or str, NaN, and the lenient
    reading of a refused line keep their strict values and drop the rest."""
    assert decode_strict(b'{"a": 1, "b": {"a": 2, "a": 3}}') == (
        None, 'key "a" appears twice in one object')
    assert decode_strict('[{"k": 1}, {"k": 2}]') == ([{"k": 1}, {"k": 2}], None)
    assert decode_strict(b'{"x": 1.50}') == ({"x": Decimal("1.50")}, None)
    with pytest.raises(ValueError, match="is not a JSON number"):
        load_json('{"x": NaN}')
    members = lenient_members(b'{"id": 7, "params": {"a": 1, "a": 2}, "id": 8, "method": "m"}')
    assert members == {"id": [b"7", b"8"], "params": [b'{"a": 1, "a": 2}'],
                       "method": [b'"m"']}
    assert [strict_value(text) for text in (b'"m"', b"NaN", b"[1,")] == ["m", None, None]
