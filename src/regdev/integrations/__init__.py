"""regdev inside agent frameworks: adapters that hand the model's raw arguments text to the
gate wherever the framework exposes it.

One module per framework, each an extra (imported only when used):

* :mod:`regdev.integrations.openai_agents`: the OpenAI Agents SDK's ``FunctionTool`` list
  (``pip install 'regdev[openai-agents]'``);
* :mod:`regdev.integrations.pydantic_ai`: a pydantic-ai toolset
  (``pip install 'regdev[pydantic-ai]'``);
* :mod:`regdev.integrations.langchain`: LangChain tools and a tool-call answerer that reads
  the raw text where the provider keeps it (``pip install 'regdev[langchain]'``).

Rules of this package:

* Every call goes through :meth:`~regdev.Gate.ahandle_tool_call` with the model's arguments
  text as the framework received it from the provider, never text the framework decoded and
  encoded again, wherever the framework holds it; where it does not, the module's docstring
  and ``docs/agents.md`` say which checks are lost.
* The framework's run is the gate's loop (``loop_id``) and its step the gate's step, so that
  ``regdev report`` counts first tries and retries as the run made them; the proposer is
  ``FRAMEWORK:MODEL``.
* Only the tools the session may call are offered (:func:`regdev.tool_definitions` with the
  gate), and a write the gate would put to its approval hook is put to the framework's own
  human-in-the-loop mechanism where it has one (:meth:`~regdev.Gate.needs_approval`), its
  answer handed to the call's ``approve=``.
"""

from __future__ import annotations

__all__: list[str] = []
