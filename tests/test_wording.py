"""A model, or a person, never reads a library's wording: every message made from what
msgspec, Python's codecs, pyserial, SQLite or tomllib raised is in regdev's own words
(regdev.core._wording), whatever the input."""

from __future__ import annotations

import json
import re
import sqlite3
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import pytest
import serial
from hypothesis import example, given
from hypothesis import strategies as st

from regdev import AuditError, Gate, Policy, PolicyError, Refusal, SerialDevice, read_audit
from regdev.cli._main import main
from regdev.core._json import json_problem
from regdev.core._wording import serial_problem, sqlite_problem, toml_problem
from regdev.gate._parse import load_json, parse

#: Phrases of the libraries' own messages; none may reach a message regdev makes.
LIBRARY_WORDS = [
    # msgspec
    "Input data was truncated", "JSON is malformed", "Invalid UTF-8 encoded string",
    "Integer value out of range", "Number out of range", "(byte ", "Expected `", "$[",
    "object keys must be strings", "trailing characters", "invalid character",
    # Python's codecs
    "codec can't", "surrogates not allowed", "in position", "invalid start byte",
    # pyserial
    "device reports readiness", "multiple access on port", "Attempting to use a port",
    "socket disconnected", "reader thread died", "read failed", "write failed",
    "could not open port", "Could not configure port", "invalid URL, protocol",
    "Not a valid baudrate", "Errno",
    # SQLite
    "file is not a database", "attempt to write a readonly database", "database is locked",
    "unable to open database file",
    # tomllib
    "Expected '='", "Invalid value", "Unclosed array", "Cannot declare", "(at line",
]


def no_library_words(message: str) -> None:
    assert not [words for words in LIBRARY_WORDS if words in message], message


# --- JSON text -------------------------------------------------------------------------------

CALL = b'{"tool": "write_register", "arguments": {"addr": 3, "data": [1, "x\\u00e9", 2.5]}}'
#: Bytes and text put into a call at every place: each is not JSON there, or not everywhere.
INSERTS = [b"\xc2\xa0", b"\xef\xbb\xbf", b"\x00", b"\x01", b"\xff", b"\xc3", b"'", b"NaN",
           b"Infinity", b"-", b"+1", b"01", b"1.", b"1e", b",", b"}", b"]", b":", b"{", b"[",
           b'"', b"\\", b"\\x", b"\\u12g4", b"\\ud800", b'"\\ud800\\u0041"', b"9" * 4400,
           b"1e999999999999", b"tru", b" 1 2"]


def _broken_calls() -> list[bytes]:
    broken = [CALL[:end] for end in range(len(CALL))]  # cut short everywhere
    for insert in INSERTS:
        broken += [CALL[:at] + insert + CALL[at:] for at in range(0, len(CALL), 3)]
    return broken


def _message(raw: bytes | str, dialect: str = "canonical") -> str | None:
    result = parse(raw, dialect=dialect)  # type: ignore[arg-type]
    if isinstance(result, Refusal):
        return result.message
    refusal = result.refusal
    return refusal.message if refusal is not None and refusal.code == "not-json" else None


def test_every_way_a_call_is_not_json_is_said_in_regdevs_words() -> None:
    """A call cut short at every byte, and with each troublesome byte or word put in at every
    third place, as bytes and as text (bytes that are not UTF-8 carried as Python does, in
    surrogates): every not-json message is regdev's frame around regdev's words, names a
    byte inside the text when it names one, and never falls back to the general phrase (each
    of msgspec's messages met here has regdev's words)."""
    seen = 0
    for raw in _broken_calls():
        for data in (raw, raw.decode("utf-8", "surrogateescape")):
            message = _message(data)
            if message is None:
                continue
            seen += 1
            assert message.startswith("not one strict JSON document: ") and message.endswith(
                "; send one JSON object"), message
            no_library_words(message)
            assert "not valid JSON" not in message, (raw, message)  # the table knew it
            for at in re.findall(r"at byte (\d+)", message):
                assert int(at) <= len(raw), (raw, message)
    assert seen > 1000


def test_openai_arguments_text_that_is_not_json_is_said_in_regdevs_words() -> None:
    """The same for the JSON text inside an OpenAI call's function.arguments."""
    for raw in _broken_calls()[::7]:
        text = raw.decode("utf-8", "replace")
        call = {"type": "function", "function": {"name": "read_register", "arguments": text}}
        message = _message(json.dumps(call), "openai")
        if message is not None:
            assert message.startswith("function.arguments is not one strict JSON document: ")
            no_library_words(message)


@given(st.one_of(st.binary(max_size=80), st.text(max_size=80)))
@example(b'{"a": "\xff"}')
@example("{\"a\": \"\udcff\"}")
@example(b"")
def test_any_text_that_is_not_json_is_said_in_regdevs_words(raw: bytes | str) -> None:
    """Whatever the input, a not-json message holds no library wording; so does load_json's
    error for the JSON files regdev reads."""
    message = _message(raw)
    if message is not None:
        no_library_words(message)
    try:
        load_json(raw)
    except ValueError as error:
        no_library_words(str(error))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{}x", "more text after the end of the JSON document, at byte 2"),
        ('{"a":1}{"b":2}', "more text after the end of the JSON document, at byte 7"),
        ('"\u00e9" x', "more text after the end of the JSON document, at byte 5"),  # é: 2 bytes
        ("nope", "unexpected `o` at byte 1"),
        ("not json", "unexpected `o` at byte 1"),
        ("falsy", "unexpected `y` at byte 4"),
        ('{"a":tru}', "unexpected `}` at byte 8"),
        ("nul", "the text ends at byte 3, before the JSON document does"),
        ("nan", "nan, at byte 0, is not a JSON number"),
        ("[-Infinity]", "-Infinity, at byte 1, is not a JSON number"),
        ("1.x", "an invalid number (JSON numbers have no leading zeros"),
        ("01", ", at byte 1"),
        ('"\\u12"', "a \\u escape needs four hexadecimal digits, at byte 5"),
        ('"\\x"', "an invalid escape in a string"),
        ("[1,]", "a comma with no item after it before `]`, at byte 3"),
    ],
)
def test_json_problem_names_the_first_byte_no_json_document_has_there(text: str,
                                                                         said: str) -> None:
    """The byte named counts from 0 and is the first one that cannot continue a JSON
    document (the text's length when the text ends too early); NaN and Infinity in any case
    are named as such, where the word starts."""
    for data in (text, text.encode()):
        message = _message(data)
        assert message is not None and said in message, message


def _json_error_byte(text: str) -> int | None:
    """Where Python's json module says ``text`` goes wrong, in UTF-8 bytes (None: it reads
    it, or takes NaN or Infinity, which regdev refuses)."""
    try:
        json.loads(text, parse_constant=lambda word: 1 / 0)
    except json.JSONDecodeError as error:
        return len(text[:error.pos].encode("utf-8", "surrogatepass"))
    except ZeroDivisionError:
        return None
    return None


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False,
                                                                       allow_infinity=False)
    | st.text("aé€😀\\\"x", max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("ké", max_size=2), inner,
                                                               max_size=3),
    max_leaves=6)
_BREAKS = st.sampled_from(["", "x", ",", ":", "]", "}", "[", "{", '"', "\\", "\\u12", "-",
                           ".", "e", "0", "01", "tru", "nul", " ", "é", "\x01", "'", "nan"])


@given(_JSON_VALUES, st.data())
@example(["é"], None)
def test_the_byte_named_is_where_the_json_module_finds_the_fault_or_in_its_token(
        value: Any, data: st.DataObject | None) -> None:
    """For a JSON text broken at a random place (a cut, a piece put in, a character dropped),
    as str and as UTF-8 bytes: the message names byte N (UTF-8 bytes from 0, also for text
    with multi-byte characters), and Python's json module, reading the same text, reports
    its error at byte J (its ``pos`` is in characters; here in bytes) with J <= N <= the
    text's length, and when J < N the bytes from J up to N are one token json began at J: a
    string (from its quote), or a literal, number or escape (no whitespace or structural
    character among them). When the text ends early N is its length."""
    text = json.dumps(value, ensure_ascii=False)
    if data is not None:
        at = data.draw(st.integers(0, len(text)))
        how = data.draw(st.sampled_from(["cut", "put", "drop"]))
        piece = data.draw(_BREAKS)
        text = (text[:at] if how == "cut" else text[:at] + piece + text[at:] if how == "put"
                else text[:at] + text[at + 1:])
    else:
        text = '["é" x]'
    raw = text.encode()
    json_at = _json_error_byte(text)
    for given_data in (text, raw):
        message = _message(given_data)
        places = [int(n) for n in re.findall(r"at byte (\d+)", message or "")]
        if json_at is None or not places:
            continue
        named = places[0]
        assert json_at <= named <= len(raw), (text, message, json_at)
        between = raw[json_at:named]
        assert between.startswith(b'"') or not set(between) & set(b" \t\n\r,:[]{}"), (
            text, message, json_at)


def test_json_problem_never_passes_a_library_message_on() -> None:
    """A message regdev's tables do not know (a later msgspec's) is said generally, with the
    place it named: never quoted."""
    assert json_problem(msgspec.DecodeError("JSON is malformed: something new (byte 7)"),
                        b"{}") == "not valid JSON at byte 7"
    assert json_problem(msgspec.DecodeError("Brand new wording"), b"{}") == "not valid JSON"
    assert json_problem(ValueError("whatever Python says"), "x") == "not valid JSON"


# --- the command line's raw call --------------------------------------------------------------


def test_a_call_argument_that_is_not_utf8_is_said_as_the_byte(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev call` with a byte that is not UTF-8 (as the shell passes it, in argv): the
    byte is named, not Python's codec error."""
    raw = b'{"tool": "read_register", "arguments": {"addr": "\xff"}}'.decode(
        "utf-8", "surrogateescape")
    assert main(["call", "--no-audit", raw]) == 1
    out = capsys.readouterr().out
    no_library_words(out)
    assert f"invalid UTF-8: byte {raw.index(chr(0xDCFF))} is 0xFF" in out


# --- serial ports -----------------------------------------------------------------------------


def _raised(error: BaseException, inner: BaseException | None = None) -> BaseException:
    """``error`` as pyserial raises it (inside ``except inner``, when given)."""
    try:
        if inner is None:
            raise error
        try:
            raise inner
        except BaseException:
            raise error  # noqa: B904 - pyserial raises without `from`: the context is kept
    except BaseException as caught:
        return caught


#: What pyserial raises, each as it raises it, and the words regdev says it in.
PYSERIAL: list[tuple[BaseException, str]] = [
    (serial.SerialException("device reports readiness to read but returned no data (device "
                            "disconnected or multiple access on port?)"),
     "the port signalled data but gave none (the device was unplugged, or another program is "
     "using the port)"),
    (serial.PortNotOpenError(), "the port is not open"),
    (serial.SerialException("socket disconnected"), "the other end closed the connection"),
    (serial.SerialException("connection failed (reader thread died)"), "the connection failed"),
    (serial.SerialException("write failed (select)"), "writing to the port failed"),
    (serial.SerialTimeoutException("Write timeout"),
     "writing timed out (is the line blocked by flow control?)"),
    (_raised(serial.SerialException("read failed: [Errno 5] Input/output error"),
             OSError(5, "Input/output error")), "Input/output error"),
    (serial.SerialException(2, "could not open port /dev/x: [Errno 2] No such file or "
                               "directory: '/dev/x'"), "No such file or directory"),
    (serial.SerialException("Remote does not accept parameter change (RFC2217): baudrate"),
     "the RFC 2217 server refused the port settings"),
    (serial.SerialException("timeout while waiting for option 'baudrate'"),
     "the RFC 2217 server did not confirm the port settings in time"),
    (ValueError("invalid URL, protocol 'foo' not known"), "unknown URL scheme"),
    (ValueError("Not a valid baudrate: 0"), "the port does not take this baud rate"),
    (serial.SerialException("something pyserial says one day"), "the port failed"),
]


@pytest.mark.parametrize(("raised", "words"), PYSERIAL, ids=[w for _, w in PYSERIAL])
def test_pyserial_errors_are_said_in_regdevs_words(raised: BaseException, words: str) -> None:
    """Each pyserial failure is said in regdev's words (or the OS's reason), never pyserial's."""
    assert serial_problem(raised) == words
    no_library_words(words)


class _FailingPort:
    """A port whose reads fail as pyserial's do when a USB adapter is unplugged."""

    timeout = 0.01
    in_waiting = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def read(self, size: int = 1) -> bytes:
        raise serial.SerialException("device reports readiness to read but returned no data "
                                     "(device disconnected or multiple access on port?)")

    def write(self, data: bytes) -> int:
        return len(data)

    def reset_input_buffer(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_model_reads_regdevs_words_when_the_port_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the gate, an unplugged adapter's pyserial error reaches the model as regdev's
    words, in the device-timeout observation of the read that was sent."""
    monkeypatch.setattr(serial, "serial_for_url", _FailingPort)
    with SerialDevice("/dev/regdev-test", timeout=0.05, retries=0) as device:
        observation = Gate(device).handle(
            '{"tool": "read_register", "arguments": {"addr": 1}}')
    assert observation.ok is False and observation.stage == "execute"
    assert "the port signalled data but gave none" in (observation.message or "")
    no_library_words(observation.message or "")


# --- the audit database -----------------------------------------------------------------------


def test_an_audit_database_that_is_not_one_is_said_in_regdevs_words(tmp_path: Path) -> None:
    """A file that is not an SQLite database: regdev's words for SQLite's result code."""
    path = tmp_path / "garbage.db"
    path.write_bytes(b"not a database, " * 64)
    with pytest.raises(AuditError) as info:
        read_audit(path)
    assert str(info.value).endswith(": the file is not an SQLite database")
    no_library_words(str(info.value))


@pytest.mark.parametrize(("code", "words"), [
    (13, "the disk is full"), (10, "reading or writing the file failed (a disk I/O error)"),
    (8, "the file is read-only"), (5, "another program is writing it (the database is locked)"),
    (26, "the file is not an SQLite database"), (1, "the database failed (OperationalError)")])
def test_sqlite_errors_are_said_by_their_code(code: int, words: str) -> None:
    """SQLite's result code decides the words (an extended code by its primary one)."""
    error = sqlite3.OperationalError("SQLite's own text")
    error.sqlite_errorcode = code | 0x300  # an extended code keeps the primary in its low byte
    assert sqlite_problem(error) == words


# --- TOML -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["a", "a = ", "a = [1", "a = {b=1", 'a = "x', "a=1\na=2",
                                  "a = 1 2", "a = bare", "[t]\n[t]", "a.=1", "= 1", "a = 1\n]"])
def test_toml_that_does_not_parse_is_said_in_regdevs_words(tmp_path: Path, text: str) -> None:
    """A policy file that is not TOML: regdev's words and tomllib's place, never tomllib's
    phrase."""
    with pytest.raises(tomllib.TOMLDecodeError) as decoding:
        tomllib.loads(text)
    words = toml_problem(decoding.value)
    no_library_words(words)
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        Policy.from_file(path)
    assert str(info.value) == f"{path}: not valid TOML: {words}"
