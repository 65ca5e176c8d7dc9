"""regdev's tools for LangChain and LangGraph (``pip install 'regdev[langchain]'``).

``tools(gate)`` gives one LangChain tool per tool the session may call (to bind to a chat
model, ``model.bind_tools(tools)``), and two ways to run the model's calls:

* **The raw text** (recommended): ``tools.answer(message)`` (or ``await
  tools.aanswer(message)``) answers an ``AIMessage``'s tool calls with one ``ToolMessage``
  each, reading each call's arguments text where the provider integration keeps it: the
  OpenAI-compatible integrations keep the text they received in
  ``message.additional_kwargs["tool_calls"]``, and text that did not parse in
  ``message.invalid_tool_calls``. The text goes to :meth:`Gate.ahandle_tool_call`
  unchanged: a repeated key is ``not-json``, ``3.0000000000000001`` is ``type-data``,
  truncated text is ``not-json``, a name no tool has is ``unknown-tool``, every one audited.
  Use it as the tool step of a LangGraph graph in place of ``ToolNode``.
* **The tools themselves** (``ToolNode``, ``AgentExecutor``, ``tool.invoke(tool_call)``):
  LangChain hands a tool the arguments it decoded already (``tool_call["args"]``), which
  regdev encodes to JSON again. What the decoder removed cannot be checked there: a
  repeated key arrives as its last value (the write may go to the wrong register),
  ``3.0000000000000001`` arrives as the float 3.0 (accepted as 3), truncated text and
  unknown names never reach a tool (LangChain answers them itself, unrecorded). Types,
  fields and ranges are still the gate's.

Where no integration keeps the text (Anthropic's, Gemini's: arguments come as an object),
both ways see the decoded object, as above.

* **Loop and step**: the LangGraph thread (``configurable.thread_id``) or else the run
  that invoked the tools is the loop; ``langgraph_step`` the step when LangGraph runs it,
  else the calls' order. ``answer`` takes ``loop_id=`` and ``step=`` to say them yourself.
  The proposer is ``langchain:MODEL`` (the message's ``response_metadata`` model name).
* **Approval**: langchain-core has no human-in-the-loop step of its own. With LangGraph,
  ask the person before the tool step (``interrupt()``, or langchain's
  ``HumanInTheLoopMiddleware``) for the calls :meth:`Gate.needs_approval` names, and pass
  the answer as ``answer(message, approved={call_id: True})``; a call not approved there
  goes to the policy's approval hook.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..core._observation import Observation
from ..gate._gate import Gate
from ..gate._parse import encode_json_data
from ..gate._policy import Approver, Session
from ..gate._providers import tool_definitions
from ._common import Runs, approver, label, require

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import BaseTool

__all__ = ["FRAMEWORK", "RegdevTools", "tools"]

#: The framework's name in proposer labels and approval records.
FRAMEWORK = "langchain"


class RegdevTools(list["BaseTool"]):
    """The LangChain tools of one gate and session, and the answerer of a model's message
    that reads the raw arguments text (see the module docstring)."""

    def __init__(self, gate: Gate, session: Session, proposer: str | None) -> None:
        super().__init__()
        self.gate, self.session, self.proposer = gate, session, proposer
        self.runs = Runs()
        #: The loop of calls made outside any LangGraph thread or run.
        self.loop_id = uuid.uuid4().hex

    def answer(self, message: AIMessage, *, loop_id: str | None = None,
               step: int | None = None, approved: Mapping[str, bool] | None = None,
               ) -> list[ToolMessage]:
        """One ``ToolMessage`` per tool call of ``message``, in order, each call's raw
        arguments text through the gate (see the module docstring).

        Args:
            message: the model's ``AIMessage``.
            loop_id: the loop the calls belong to; None: the LangGraph thread, else this
                tools object's own loop.
            step: the step of the first call (the next calls count on); None: LangGraph's
                step, else the calls' order in the loop.
            approved: a person's answers about protected writes, by tool call id.

        Returns:
            The answers, to append to the conversation after ``message``.
        """
        out = []
        for index, call in enumerate(raw_calls(message)):
            name, text, options = self._options(call, message, loop_id=loop_id, step=step,
                                                index=index, approved=approved)
            out.append(self._message(call, self.gate.handle_tool_call(name, text, **options)))
        return out

    async def aanswer(self, message: AIMessage, *, loop_id: str | None = None,
                      step: int | None = None, approved: Mapping[str, bool] | None = None,
                      ) -> list[ToolMessage]:
        """:meth:`answer` for an event loop (:meth:`Gate.ahandle_tool_call`)."""
        out = []
        for index, call in enumerate(raw_calls(message)):
            name, text, options = self._options(call, message, loop_id=loop_id, step=step,
                                                index=index, approved=approved)
            out.append(self._message(call, await self.gate.ahandle_tool_call(
                name, text, **options)))
        return out

    def _options(self, call: tuple[str, str | bytes, str | None], message: Any, *,
                 loop_id: str | None, step: int | None, index: int,
                 approved: Mapping[str, bool] | None,
                 ) -> tuple[str, str | bytes, dict[str, Any]]:
        name, text, call_id = call
        where_loop, where_step = self.where(None)
        loop = loop_id or where_loop
        metadata = getattr(message, "response_metadata", None) or {}
        model = metadata.get("model_name") or metadata.get("model")
        answer: Approver | None = None
        if approved is not None and call_id is not None and call_id in approved:
            answer = approver(FRAMEWORK, approved[call_id])
        if step is not None:
            this = step + index
        elif loop_id is None and where_step is not None:
            this = where_step
        else:
            this = self.runs.next_step(loop)
        return name, text, {
            "call_id": call_id, "session": self.session, "loop_id": loop, "step": this,
            "proposer": self.proposer or label(FRAMEWORK, model), "approve": answer}

    def where(self, run_id: object) -> tuple[str, int | None]:
        """The loop id of a call made now (the LangGraph thread, else the invoking run,
        else this object's loop) and LangGraph's step, when there is one."""
        try:
            from langchain_core.runnables.config import ensure_config  # noqa: PLC0415
            config: Mapping[str, Any] = ensure_config()
        except Exception:  # (outside any run)
            config = {}
        thread = (config.get("configurable") or {}).get("thread_id")
        step = (config.get("metadata") or {}).get("langgraph_step")
        loop = str(thread) if thread is not None else (
            str(run_id) if run_id is not None else self.loop_id)
        return loop, step if type(step) is int else None

    @staticmethod
    def _message(call: tuple[str, str | bytes, str | None],
                 observation: Observation) -> ToolMessage:
        from langchain_core.messages import ToolMessage  # noqa: PLC0415 - an extra

        name, _, call_id = call
        return ToolMessage(content=observation.to_json(), tool_call_id=call_id or "",
                           name=name, status="success" if observation.ok else "error")


def raw_calls(message: Any) -> list[tuple[str, str | bytes, str | None]]:
    """``(name, arguments text, call id)`` of each tool call in an ``AIMessage``: the text
    the provider sent where the integration kept it (``additional_kwargs["tool_calls"]``,
    OpenAI's shape), else each parsed call's arguments encoded to JSON again and each
    invalid call's text."""
    kept = (getattr(message, "additional_kwargs", None) or {}).get("tool_calls")
    if isinstance(kept, list) and kept and all(
            isinstance(c, dict) and isinstance(c.get("function"), dict) for c in kept):
        return [(str(c["function"].get("name") or ""), _text(c["function"].get("arguments")),
                 c.get("id")) for c in kept]
    calls: list[tuple[str, str | bytes, str | None]] = [
        (call["name"], _text(call["args"]), call.get("id"))
        for call in getattr(message, "tool_calls", None) or ()]
    calls += [(call.get("name") or "", _text(call.get("args")), call.get("id"))
              for call in getattr(message, "invalid_tool_calls", None) or ()]
    return calls


def _text(arguments: object) -> str | bytes:
    """Arguments as text: the text itself, else the object encoded to JSON."""
    if isinstance(arguments, (str, bytes)):
        return arguments
    encoded = encode_json_data(arguments if arguments is not None else {}, 1 << 30)
    return encoded if isinstance(encoded, bytes) else repr(arguments)


def tools(gate: Gate, *, proposer: str | None = None,
          session: Session | None = None) -> RegdevTools:
    """The gate's tools as LangChain tools, with :meth:`RegdevTools.answer`.

    Args:
        gate: the gate every call goes through.
        proposer: the proposer recorded for every call; None names it
            ``langchain:MODEL`` (from the message, with ``answer``; else ``unknown``).
        session: the caller; the gate's default session when None. Only the tools it may
            call are offered.

    Returns:
        A list of LangChain ``BaseTool`` with ``answer`` and ``aanswer``.

    Raises:
        ImportError: langchain-core is not installed (``pip install 'regdev[langchain]'``).
    """
    require("langchain_core", "langchain")
    from langchain_core.tools import BaseTool  # noqa: PLC0415 - an extra

    session = session or gate.default_session
    out = RegdevTools(gate, session, proposer)

    class RegdevTool(BaseTool):
        """One of the gate's tools; the arguments LangChain decoded, encoded to JSON again
        (see :mod:`regdev.integrations.langchain` for what that loses)."""

        def _call(self, kwargs: dict[str, Any], run_manager: Any) -> tuple[str, str | bytes,
                                                                           dict[str, Any]]:
            kwargs.pop("run_manager", None)
            parent = getattr(run_manager, "parent_run_id", None)
            loop, step = out.where(parent)
            return self.name, _text(kwargs), {
                "session": session, "loop_id": loop,
                "step": step if step is not None else out.runs.next_step(loop),
                "proposer": proposer or label(FRAMEWORK, None)}

        def _run(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> str:
            name, text, options = self._call(kwargs, run_manager)
            return gate.handle_tool_call(name, text, **options).to_json()

        async def _arun(self, *args: Any, run_manager: Any = None, **kwargs: Any) -> str:
            name, text, options = self._call(kwargs, run_manager)
            return (await gate.ahandle_tool_call(name, text, **options)).to_json()

    for definition in tool_definitions("mcp", gate, session=session):
        out.append(RegdevTool(name=definition["name"], description=definition["description"],
                              args_schema=definition["inputSchema"]))
    return out
