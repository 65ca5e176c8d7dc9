"""The MCP Inspector CLI (the TypeScript SDK's client) drives `regdev serve --http`: tools/list,
tools/call with its own argument conversion, a refusal, and no token.

The Inspector's 0.15 line is the last that runs on Node 20 (later ones need Node 22.7.5, the
2.x line 22.19); ``.ci/run`` installs it into ``.inspector/`` with npm. Where it or Node is
missing the tests skip, saying which in one line, unless ``REGDEV_REQUIRE_INSPECTOR=1`` (as
``.ci/run`` sets), which makes that a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import ROOT
from support.httpserver import Served, inprocess_server, policy_text, token

#: The Inspector CLI version the tests use, and where .ci/run installs it.
INSPECTOR = "0.15.0"
INSTALLED = ROOT / ".inspector" / "node_modules" / "@modelcontextprotocol" / "inspector-cli"
#: Preloaded into the Inspector: adds the bearer token to every request (0.15 has no option).
BEARER = ROOT / "tests" / "data" / "inspector-bearer.mjs"
INSTALL = f"npm install --prefix .inspector @modelcontextprotocol/inspector-cli@{INSPECTOR}"


def _missing() -> str | None:
    node = shutil.which("node")
    if node is None:
        return "node is not on PATH"
    version = subprocess.run([node, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    major = int(version.lstrip("v").split(".")[0]) if version[1:2].isdigit() else 0
    if major < 18:
        return f"node {version or '(unknown)'} is older than 18, which the Inspector needs"
    package = INSTALLED / "package.json"
    if not package.is_file():
        return f"the MCP Inspector CLI is not installed in .inspector/ ({INSTALL})"
    got = json.loads(package.read_text()).get("version")
    if got != INSPECTOR:
        return f"the MCP Inspector CLI in .inspector/ is {got}, not {INSPECTOR} ({INSTALL})"
    return None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    reason = _missing()
    if reason is not None:
        if os.environ.get("REGDEV_REQUIRE_INSPECTOR") == "1":
            pytest.fail(f"REGDEV_REQUIRE_INSPECTOR=1 but {reason}")
        pytest.skip(f"MCP Inspector tests: {reason}")
    with inprocess_server(tmp_path_factory.mktemp("inspector"), policy_text()) as server:
        yield server


def inspector(served: Served, *args: str, bearer: str | None = token("alice")
              ) -> tuple[int, Any, str]:
    """``mcp-inspector --cli URL --transport http ARGS``: exit status, its JSON output (or
    None), its stderr."""
    env = {**os.environ, "REGDEV_TEST_BEARER": bearer or ""}
    preload = ["--import", BEARER.as_uri()] if bearer is not None else []
    done = subprocess.run(["node", *preload, str(INSTALLED / "build" / "index.js"), served.url,
                           "--transport", "http", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    try:
        output = json.loads(done.stdout)
    except json.JSONDecodeError:
        output = None
    return done.returncode, output, done.stderr


def test_the_inspector_lists_the_tools(served: Served) -> None:
    """tools/list over HTTP: both tools, each with its inputSchema and outputSchema."""
    status, listed, err = inspector(served, "--method", "tools/list")
    assert status == 0, err
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert list(tools) == ["write_register", "read_register"]
    assert tools["write_register"]["inputSchema"]["required"] == ["addr", "data"]
    assert tools["read_register"]["outputSchema"]["properties"]["tool"] == {
        "const": "read_register"}


def test_the_inspector_calls_and_gets_refusals(served: Served) -> None:
    """tools/call: the Inspector turns --tool-arg addr=3 into the integer 3 by the schema (so
    it cannot send a wrongly typed argument); the write runs, a read sees it, addr 16 is
    range-addr with isError, and the TypeScript SDK's client accepted every
    structuredContent against the outputSchema. Each call is recorded as token:alice's."""
    calls = [("write_register", ["addr=3", "data=7"]), ("read_register", ["addr=3"]),
             ("write_register", ["addr=16", "data=7"])]
    results = []
    for name, arguments in calls:
        status, result, err = inspector(
            served, "--method", "tools/call", "--tool-name", name,
            *[part for argument in arguments for part in ("--tool-arg", argument)])
        assert status == 0, err
        results.append(result)
    assert [r["structuredContent"] for r in results] == [
        {"ok": True, "tool": "write_register", "result": {"addr": 3, "data": 7}},
        {"ok": True, "tool": "read_register", "result": {"addr": 3, "data": 7}},
        {"ok": False, "stage": "validate", "code": "range-addr",
         "message": "addr 16 is outside 0..15", "retryable": True}]
    assert [r["isError"] for r in results] == [False, False, True]
    tail = [(r.tool, r.code, r.caller) for r in served.records()][-3:]
    assert tail == [("write_register", None, "token:alice"), ("read_register", None,
                                                              "token:alice"),
                    ("write_register", "range-addr", "token:alice")]


def test_the_inspector_without_a_token_is_refused(served: Served) -> None:
    """No token: the Inspector cannot connect; it shows the server's 401 in its words."""
    status, _, err = inspector(served, "--method", "tools/list", bearer=None)
    assert status != 0
    assert "this server needs a bearer token" in err, err
