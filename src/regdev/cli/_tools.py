"""``regdev tools``: the tool definitions in a provider's format."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

import msgspec

from ..core._errors import PolicyError
from ..devices._open import open_device
from ..gate._gate import Gate
from ..gate._providers import PROVIDER_FORMATS, tool_definitions
from ._common import (
    UsageError,
    load_policy,
    map_option,
    map_tools_of,
    register_map,
)


def cmd_tools(args: argparse.Namespace, out: TextIO) -> int:
    session = None
    tools = map_tools_of(args)
    policy = load_policy(args)
    if policy is not None:
        try:  # checks the session, its tools and its registers as serve does
            with Gate(open_device(None, regmap=register_map(args)), tools, policy=policy) as gate:
                session = gate.session(args.session)
        except PolicyError as error:  # the session names a tool that is not there
            raise UsageError(f"{args.policy}: {error}") from None
    definitions = tool_definitions(args.format, tools, session=session)
    out.write(msgspec.json.format(msgspec.json.encode(definitions), indent=2).decode() + "\n")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``regdev tools`` to the subcommands."""
    tools = sub.add_parser(
        "tools", help="print the tool definitions in a provider's format (JSON)",
        description="Print the tools as one provider declares them to a model, as a JSON "
                    "array: mcp (tools/list entries with inputSchema and annotations), openai "
                    "(Chat Completions tools in strict mode) or anthropic (Messages API tools "
                    "with input_schema). All three come from the one registry; with --map FILE, "
                    "the tools of that register map (docs/maps.md). With --policy "
                    "and --session, only the tools that session is offered (as `regdev serve` "
                    "lists them).")
    tools.add_argument("--format", choices=PROVIDER_FORMATS, default="mcp",
                       help="which provider's shape (default: mcp)")
    map_option(tools)
    tools.add_argument("--policy", metavar="FILE",
                       help="a policy file, TOML (.toml) or JSON (.json); see "
                            "docs/safety.md")
    tools.add_argument("--session", metavar="NAME", default="default",
                       help="list only the tools this session of the policy is offered "
                            "(default: default)")
    tools.set_defaults(func=cmd_tools)
