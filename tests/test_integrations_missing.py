"""Each framework adapter, its framework absent, says which extra installs it."""

from __future__ import annotations

import sys

import pytest

from regdev import Gate


@pytest.mark.parametrize(("adapter", "module", "extra"), [
    ("openai_agents", "agents", "openai-agents"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("langchain", "langchain_core", "langchain"),
])
def test_adapter_without_its_framework_names_the_extra(
        monkeypatch: pytest.MonkeyPatch, adapter: str, module: str, extra: str) -> None:
    """Without the framework, the adapter raises ImportError with the install command."""
    import importlib  # noqa: PLC0415

    monkeypatch.setitem(sys.modules, module, None)  # an import of it now fails
    adapters = importlib.import_module(f"regdev.integrations.{adapter}")
    make = adapters.toolset if adapter == "pydantic_ai" else adapters.tools
    with pytest.raises(ImportError, match=rf"pip install 'regdev\[{extra}\]'"):
        make(Gate())
