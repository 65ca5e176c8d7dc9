"""regdev's tools for the OpenAI Agents SDK (``pip install 'regdev[openai-agents]'``).

``tools(gate)`` gives one ``FunctionTool`` per tool the session may call. The SDK hands each
tool's ``on_invoke_tool`` the model's arguments as the JSON text the provider sent, and the
tool hands that text to :meth:`Gate.ahandle_tool_call` unchanged: a repeated key is
``not-json``, ``3.0000000000000001`` is ``type-data``, truncated text is ``not-json``, every
one audited. The observation (regdev's one-line JSON) is the tool's output.

* **Loop and step**: each ``Runner.run`` is one loop (its id made once per run), each call
  reaching the gate one step, in order. The proposer is ``openai-agents:MODEL`` (the run
  config's model, else the agent's).
* **Unknown tools**: by default the SDK ends the run on a tool name it does not have
  (``ModelBehaviorError``) without any tool seeing it. Run with ``tools.run_config()`` (or
  pass its ``tool_not_found_behavior`` and ``tool_error_formatter`` to your own
  ``RunConfig``): the name is then refused by the gate as ``unknown-tool``, recorded, and the
  refusal is the model's answer. The SDK does not hand the formatter the call's arguments,
  so that record holds no arguments text.
* **Approval**: a write the gate would put to its approval hook (a protected register) makes
  the SDK interrupt the run (``needs_approval``); ``RunState.approve()`` or ``reject()``
  answers it, and the answer reaches the gate's approval step for that call. A rejection the
  SDK answers itself is recorded through ``tools.run_config()``'s formatter as
  ``approval-denied``. Note the SDK's own rule: arguments text it cannot parse needs approval
  before anything else runs, so with protected registers a truncated call to a write tool is
  put to the person first (then refused ``not-json`` if approved).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..core._observation import Observation, refuse
from ..gate._gate import Gate
from ..gate._policy import Session
from ..gate._providers import offered_tools, tool_definitions
from ..gate._tools import ToolSet
from ..gate._validate import ReferenceValidator
from ._common import Runs, approver, label, require

if TYPE_CHECKING:
    from agents import FunctionTool, RunConfig

__all__ = ["FRAMEWORK", "RegdevTools", "tools"]

#: The framework's name in proposer labels and approval records.
FRAMEWORK = "openai-agents"


class RegdevTools(list["FunctionTool"]):
    """The ``FunctionTool`` list of one gate and session, and the run configuration that
    routes unknown tool names and rejected approvals through the gate's audit log."""

    def __init__(self, gate: Gate, session: Session, proposer: str | None) -> None:
        super().__init__()
        self.gate, self.session, self.proposer = gate, session, proposer
        self.runs = Runs()
        self._words = ReferenceValidator(ToolSet(offered_tools(gate.tools, session)))

    def run_config(self, **options: Any) -> RunConfig:
        """A ``RunConfig`` (the SDK's, with ``options`` passed on) whose unknown tool names
        get the gate's ``unknown-tool`` answer and whose rejected approvals are recorded."""
        agents = require("agents", "openai-agents")
        return agents.RunConfig(tool_not_found_behavior="return_error_to_model",  # type: ignore[no-any-return]
                                tool_error_formatter=self._format_error, **options)

    def where(self, context: Any) -> tuple[str, int, str]:
        """The loop id, step and proposer of a call in the run ``context`` belongs to."""
        loop_id = self.runs.loop_of(context.usage)  # one Usage object per run
        config = getattr(context, "run_config", None)
        agent = getattr(context, "agent", None)
        model = getattr(config, "model", None) or getattr(agent, "model", None)
        proposer = self.proposer
        if proposer is None:  # (the error formatter's context names no agent: the run's last)
            proposer = label(FRAMEWORK, model) if model is not None else \
                self.runs.named.get(loop_id, label(FRAMEWORK, None))
            self.runs.named[loop_id] = proposer
        return loop_id, self.runs.next_step(loop_id), proposer

    async def _format_error(self, args: Any) -> str | None:
        """The SDK's tool error formatter: an unknown tool name or a rejected approval, put
        to the gate's audit log with regdev's answer."""
        if args.kind not in ("tool_not_found", "approval_rejected"):
            return None
        loop_id, step, proposer = self.where(args.run_context)
        if args.kind == "tool_not_found":
            refusal = self._words.check({"tool": args.tool_name, "arguments": {}})
            if refusal is None:  # (a tool the SDK lost but the gate has: not ours)
                return None
        else:
            refusal = refuse("approval-denied", f"the person asked through {FRAMEWORK} "
                                                "rejected this write; it was not run",
                             "authorize")
        observation = Observation.refused(refusal, args.call_id)
        if self.gate.audit is not None:
            observation = self.gate.refuse("", refusal, dialect="canonical",
                                           session=self.session, loop_id=loop_id, step=step,
                                           proposer=proposer)
        return Observation.refused(observation.refusal or refusal, args.call_id).to_json()


def tools(gate: Gate, *, proposer: str | None = None,
          session: Session | None = None) -> RegdevTools:
    """The gate's tools as OpenAI Agents SDK ``FunctionTool`` objects.

    Args:
        gate: the gate every call goes through.
        proposer: the proposer recorded for every call; None names it
            ``openai-agents:MODEL`` from the run.
        session: the caller; the gate's default session when None. Only the tools it may
            call are offered.

    Returns:
        A list of ``FunctionTool`` (``Agent(tools=...)``) with ``run_config()``.

    Raises:
        ImportError: the Agents SDK is not installed (``pip install
            'regdev[openai-agents]'``).
    """
    agents = require("agents", "openai-agents")
    session = session or gate.default_session
    out = RegdevTools(gate, session, proposer)
    asks = bool(gate.protected_registers)
    for definition in tool_definitions("openai", gate, session=session):
        function = definition["function"]
        out.append(agents.FunctionTool(
            name=function["name"], description=function["description"],
            params_json_schema=function["parameters"], strict_json_schema=True,
            on_invoke_tool=functools.partial(_invoke, out),
            needs_approval=functools.partial(_needs_approval, out, function["name"])
            if asks else False))
    return out


async def _needs_approval(tools: RegdevTools, name: str, context: Any,
                          arguments: dict[str, Any], call_id: str) -> bool:
    """The SDK's ``needs_approval``: the write would be put to the gate's approval hook."""
    return tools.gate.needs_approval(name, arguments, session=tools.session)


async def _invoke(tools: RegdevTools, context: Any, arguments: str) -> str:
    """The SDK's ``on_invoke_tool``: the raw arguments text through the gate."""
    name = context.tool_name
    loop_id, step, proposer = tools.where(context)
    approved = context.is_tool_approved(name, context.tool_call_id)
    observation = await tools.gate.ahandle_tool_call(
        name, arguments, call_id=context.tool_call_id, session=tools.session,
        loop_id=loop_id, step=step, proposer=proposer, approve=approver(FRAMEWORK, approved))
    return observation.to_json()
