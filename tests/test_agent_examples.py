"""The example scripts of docs/agents.md, one per agent framework, run against their
recorded models."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: script -> (the framework's module, its extra, the verdicts of its recorded run in order)
SCRIPTS = {
    "agents_openai_agents.py": ("agents", "openai-agents", [
        "type-addr", "ok", "not-json", "ok", "type-data", "ok", "not-json", "ok",
        "unknown-tool", "ok"]),
    "agents_pydantic_ai.py": ("pydantic_ai", "pydantic-ai", [
        "type-addr", "ok", "not-json", "ok", "type-data", "ok", "not-json", "ok"]),
    "agents_langchain.py": ("langchain_core", "langchain", [
        "type-addr", "ok", "not-json", "ok", "type-data", "ok", "not-json", "ok",
        "unknown-tool", "ok"]),
}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_agent_example_runs(script: str) -> None:
    """The script runs to its end: each verdict as the gate gives it, 0% first-try valid,
    every mistake recovered."""
    module, extra, verdicts = SCRIPTS[script]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"needs the {extra} extra: pip install 'regdev[{extra}]'")
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    steps = [line.rsplit("-> ", 1)[1] for line in lines if line.startswith("step ")]
    assert steps == verdicts
    (row,) = [line for line in lines if line.split(":")[0] in (
        "openai-agents", "pydantic-ai", "langchain") and "%" in line]
    assert row.split()[3:5] == ["0%", "100%"]
