"""``regdev compile``: the compiled validator as a standalone module."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from ..core._errors import SchemaError
from ..core._json import load_json
from ..core._text import display_text
from ..gate._compile import generate_source
from ..gate._tools import REGISTER_TOOLS, ToolSet
from ._common import (
    UsageError,
    count,
    map_option,
    map_tools_of,
)


def _load_tools(path: str | None) -> ToolSet:
    """The register tools, or the tool set in a JSON file (UsageError when it is unusable)."""
    if path is None:
        return REGISTER_TOOLS
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        tools = ToolSet.from_json(data)
    except SchemaError as error:
        provider = _provider_format(data)
        if provider is not None:
            raise UsageError(f"{path} looks like the {provider} format; regdev compile reads "
                             "MCP tools/list entries (regdev tools --format mcp)") from None
        raise UsageError(f"{path}: {error}") from None
    if not tools:  # a validator that refuses every call as unknown-tool: surely a mistake
        raise UsageError(f"{path} declares no tools (an array of MCP tools/list entries, or "
                         '{"tools": [...]}, with at least one)')
    return tools


def _provider_format(data: bytes) -> str | None:
    """``"OpenAI"`` or ``"Anthropic"`` when the first tool in ``data`` (JSON text: an array,
    or ``{"tools": [...]}``) has that provider's shape and not MCP's, else None."""
    try:
        doc = load_json(data)
    except ValueError:
        return None
    entries = doc.get("tools") if isinstance(doc, dict) else doc
    first = entries[0] if isinstance(entries, list) and entries else None
    if not isinstance(first, dict) or "inputSchema" in first:
        return None
    if first.get("type") == "function" or "parameters" in first:  # Chat Completions, Responses
        return "OpenAI"
    return "Anthropic" if "input_schema" in first else None


def cmd_compile(args: argparse.Namespace, out: TextIO) -> int:
    if args.map is not None and args.tools is not None:
        raise UsageError("give --map FILE or --tools FILE, not both")
    tools = map_tools_of(args) if args.map is not None else _load_tools(args.tools)
    if "write_value" in tools and tools["write_value"].rules is not None:
        raise UsageError(f"{args.map}: the map's typed values are checked by the gate "
                         "(write_value's range in units and resolution), which a standalone "
                         "module does not do yet; compile a map without writable values, or "
                         "check with the gate (regdev call --map)")
    try:
        source = generate_source(tools)
    except SchemaError as error:  # pragma: no cover - the tool set was checked when loaded
        raise UsageError(str(error)) from None
    if args.output in (None, "-"):
        out.write(source)
        return 0
    try:
        Path(args.output).write_text(source, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write {args.output}: {error.strerror or error}") from None
    print(display_text(f"regdev compile: wrote {args.output} ({count(len(tools), 'tool')}: "
                       f"{', '.join(tools)}); it needs only the standard library: "
                       "check(call, tool_choice=None)"), file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    """Add ``regdev compile`` to the subcommands."""
    compile_ = sub.add_parser(
        "compile", help="write the compiled validator as a standalone Python module",
        description="Compile tool schemas (the built-in register tools, the tools of a "
                    "register map with --map FILE, or --tools FILE) into "
                    "a Python module that needs only the standard library and defines "
                    "check(call, tool_choice=None): None for a valid canonical call "
                    '{"tool": NAME, "arguments": {...}}, else the verdict code. With --map, '
                    "check also applies the map's rules after the schema's (no-register, "
                    "reserved-bits, field-value, and read-only-register for a register the "
                    "map makes read-only): the gate's verdicts up to authorize. A schema "
                    "keyword outside the supported subset (docs/validator.md) is an error "
                    "naming the keyword and its JSON Pointer, exit 2.")
    compile_.add_argument("--tools", metavar="FILE",
                          help="JSON file of tool definitions: an array of MCP tools/list "
                               'entries ({"name", "inputSchema", ...}) or {"tools": [...]}, '
                               "as `regdev tools > tools.json` writes them (not the openai or "
                               "anthropic format); default: the register tools")
    map_option(compile_)
    compile_.add_argument("-o", "--output", metavar="OUT",
                          help="write the module to OUT (default: standard output)")
    compile_.set_defaults(func=cmd_compile)
