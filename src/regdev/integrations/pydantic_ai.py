"""regdev's tools as a pydantic-ai toolset (``pip install 'regdev[pydantic-ai]'``).

``toolset(gate)`` is an ``AbstractToolset`` whose tools' argument validator lets the model's
arguments text through untouched (pydantic-ai's own validator would decode it first: a
repeated key would keep its last value and ``3.0000000000000001`` would become 3). The
toolset hands that text to :meth:`Gate.ahandle_tool_call`; a refusal the model can fix
(``retryable``) becomes pydantic-ai's retry (``ModelRetry``) carrying regdev's observation as
the message, and any other answer is the tool's result (regdev's one-line JSON).

* **Loop and step**: the run's ``run_id`` is the loop id, its ``run_step`` the step.
  The proposer is ``pydantic-ai:MODEL`` (the run's model name).
* **Where the text is not raw**: a provider that sends arguments as an object (Anthropic,
  Gemini, Bedrock) gives pydantic-ai a dict; it is encoded to JSON again, so what the
  provider's own decoder did to the text (a repeated key's last value) cannot be seen.
* **Unknown tools**: pydantic-ai answers a name no toolset has (``Unknown tool name``, a
  retry) before any toolset sees it, so such a call is not recorded in the audit log.
* **Approval**: a write the gate would put to its approval hook raises ``ApprovalRequired``:
  the run ends with ``DeferredToolRequests`` (add it to the agent's ``output_type``), and the
  next run with ``DeferredToolResults`` (the person's answer) runs the call with that answer
  at the gate's approval step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..gate._gate import Gate
from ..gate._parse import encode_json_data
from ..gate._policy import Session
from ..gate._providers import tool_definitions
from ._common import approver, label, require

if TYPE_CHECKING:
    from pydantic_ai.toolsets import AbstractToolset

__all__ = ["FRAMEWORK", "toolset"]

#: The framework's name in proposer labels and approval records.
FRAMEWORK = "pydantic-ai"
#: The key the raw arguments text travels under, from the validator to ``call_tool``.
_TEXT = "arguments_text"


class _RawText:
    """The tools' argument validator: the text as the model wrote it, never decoded (the
    gate reads it); arguments a provider gave as an object are encoded to JSON text."""

    def validate_json(self, input: str | bytes | bytearray, *, allow_partial: Any = False,
                      **kwargs: Any) -> dict[str, Any]:
        text = bytes(input) if isinstance(input, bytearray) else input
        return {_TEXT: text}

    def validate_python(self, input: Any, *, allow_partial: Any = False,
                        **kwargs: Any) -> dict[str, Any]:
        if isinstance(input, (str, bytes)):
            return {_TEXT: input}
        if isinstance(input, dict) and set(input) == {_TEXT}:  # (validated already)
            return input
        text = encode_json_data(input, 1 << 30)
        return {_TEXT: text if isinstance(text, bytes) else repr(input)}


def toolset(gate: Gate, *, proposer: str | None = None, session: Session | None = None,
            max_retries: int = 1, id: str | None = None) -> AbstractToolset[Any]:
    """The gate's tools as a pydantic-ai toolset (``Agent(toolsets=[...])``).

    Args:
        gate: the gate every call goes through.
        proposer: the proposer recorded for every call; None names it
            ``pydantic-ai:MODEL`` from the run.
        session: the caller; the gate's default session when None. Only the tools it may
            call are offered.
        max_retries: retries pydantic-ai allows a tool after a refusal, >= 0 (regdev's loop
            allows 1).
        id: the toolset's id (for durable execution); None: ``regdev``.

    Returns:
        The toolset.

    Raises:
        ImportError: pydantic-ai is not installed (``pip install 'regdev[pydantic-ai]'``).
        ValueError: ``max_retries`` < 0.
    """
    require("pydantic_ai", "pydantic-ai")
    if type(max_retries) is not int or max_retries < 0:
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    made: AbstractToolset[Any] = _toolset_class()(
        gate, session or gate.default_session, proposer, max_retries, id or "regdev")
    return made


_CLASS: Any = None


def _toolset_class() -> Any:
    """The toolset class, made once pydantic-ai is imported."""
    global _CLASS  # noqa: PLW0603 (made on first use: pydantic-ai is an extra)
    if _CLASS is not None:
        return _CLASS
    from pydantic_ai.exceptions import ApprovalRequired, ModelRetry  # noqa: PLC0415 - an extra
    from pydantic_ai.tools import ToolDefinition  # noqa: PLC0415
    from pydantic_ai.toolsets import AbstractToolset  # noqa: PLC0415
    from pydantic_ai.toolsets.abstract import ToolsetTool  # noqa: PLC0415

    validator = _RawText()

    @dataclass(init=False)
    class RegdevToolset(AbstractToolset[Any]):
        """regdev's tools; see :mod:`regdev.integrations.pydantic_ai`."""

        def __init__(self, gate: Gate, session: Session, proposer: str | None,
                     max_retries: int, id: str) -> None:
            self.gate, self.session, self.proposer = gate, session, proposer
            self.max_retries, self._id = max_retries, id
            self.definitions = [
                ToolDefinition(name=d["name"], description=d["description"],
                               parameters_json_schema=d["inputSchema"])
                for d in tool_definitions("mcp", gate, session=session)]

        @property
        def id(self) -> str | None:
            return self._id

        async def get_tools(self, ctx: Any) -> dict[str, ToolsetTool[Any]]:
            return {d.name: ToolsetTool(toolset=self, tool_def=d, max_retries=self.max_retries,
                                        args_validator=validator)
                    for d in self.definitions}

        async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any,
                            tool: ToolsetTool[Any]) -> Any:
            text = tool_args[_TEXT]
            approve = None
            if self.gate.needs_approval(name, text, session=self.session):
                if not ctx.tool_call_approved:
                    raise ApprovalRequired(metadata={"registers": sorted(
                        self.gate.protected_registers)})
                approve = approver(FRAMEWORK, True)
            observation = await self.gate.ahandle_tool_call(
                name, text, call_id=ctx.tool_call_id, session=self.session,
                loop_id=ctx.run_id, step=ctx.run_step,
                proposer=self.proposer or label(FRAMEWORK, ctx.model), approve=approve)
            if observation.refusal is not None and observation.refusal.retryable:
                raise ModelRetry(observation.to_json())
            return observation.to_json()

    _CLASS = RegdevToolset
    return _CLASS
