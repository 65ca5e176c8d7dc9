"""``regdev tools``: the tool definitions in a provider's format."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

import msgspec

from ..agents._providers import PROVIDER_FORMATS, tool_definitions
from ..core._errors import PolicyError
from ..gate._gate import Gate
from ._common import (
    UsageError,
    load_policy,
)


def cmd_tools(args: argparse.Namespace, out: TextIO) -> int:
    session = None
    policy = load_policy(args)
    if policy is not None:
        try:
            with Gate(policy=policy) as gate:  # checks the session and its tools as serve does
                session = gate.session(args.session)
        except PolicyError as error:  # the session names a tool that is not there
            raise UsageError(f"{args.policy}: {error}") from None
    definitions = tool_definitions(args.format, session=session)
    out.write(msgspec.json.format(msgspec.json.encode(definitions), indent=2).decode() + "\n")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``regdev tools`` to the subcommands."""
    tools = sub.add_parser(
        "tools", help="print the tool definitions in a provider's format (JSON)",
        description="Print the tools as one provider declares them to a model, as a JSON "
                    "array: mcp (tools/list entries with inputSchema and annotations), openai "
                    "(Chat Completions tools in strict mode) or anthropic (Messages API tools "
                    "with input_schema). All three come from the one registry. With --policy "
                    "and --session, only the tools that session is offered (as `regdev serve` "
                    "lists them).")
    tools.add_argument("--format", choices=PROVIDER_FORMATS, default="mcp",
                       help="which provider's shape (default: mcp)")
    tools.add_argument("--policy", metavar="FILE",
                       help="a policy file (TOML, or JSON for other suffixes); see "
                            "docs/safety.md")
    tools.add_argument("--session", metavar="NAME", default="default",
                       help="list only the tools this session of the policy is offered "
                            "(default: default)")
    tools.set_defaults(func=cmd_tools)
