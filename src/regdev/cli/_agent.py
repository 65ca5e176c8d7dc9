"""``regdev agent``: a real model drives the device through the gate, given a task in words."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any, TextIO

from ..agents._models import (
    PROVIDERS,
    AgentResult,
    AgentStep,
    Endpoint,
    ModelError,
    Turn,
    make_endpoint,
    run_agent,
)
from ..agents._shell import describe, format_registers, register_rows
from ..core._errors import SchemaError
from ..core._limits import seconds_problem
from ..core._text import display_text, escape_text
from ..devices._regmap import RegisterMap
from ._common import (
    UsageError,
    add_gate_options,
    audit_note,
    device_call,
    device_options,
    json_line,
    open_gate,
    port_device,
    write_line,
)

#: Each provider's default environment variable for the API key.
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


#: The highest sampling temperature a provider takes (OpenAI's 2; Anthropic's is 1, and its
#: API refuses more in its own words).
MAX_TEMPERATURE = 2.0


def endpoint_from(args: argparse.Namespace) -> Endpoint:
    """The model endpoint the options of :func:`model_options` name.

    Raises:
        UsageError: an option out of range, the SDK missing, or the API key not set.
    """
    if args.max_steps < 1 or args.retries < 0:
        raise UsageError("--max-steps must be at least 1 and --retries at least 0")
    problem = seconds_problem(args.request_timeout)
    if problem is not None:
        raise UsageError(f"--request-timeout {problem}")
    if args.max_retries < 0:
        raise UsageError("--max-retries must be at least 0")
    options: dict[str, Any] = {
        "base_url": args.base_url, "api_key_env": args.api_key_env or KEY_ENV[args.provider],
        "timeout": args.request_timeout, "max_retries": args.max_retries}
    if args.temperature is not None:
        if not 0 <= args.temperature <= MAX_TEMPERATURE:  # NaN compares false: refused too
            raise UsageError(f"--temperature must be a number in 0..{MAX_TEMPERATURE:g}, got "
                             f"{args.temperature!r}")
        options["temperature"] = args.temperature
    if args.provider == "openai" and args.seed is not None:
        options["seed"] = args.seed
    options["strict"] = strict_mode(args)
    try:
        return make_endpoint(args.provider, args.model, **options)
    except ModelError as error:
        raise UsageError(f"--base-url: {error}" if error.kind == "base-url" else str(error)) \
            from None


def strict_mode(args: argparse.Namespace) -> bool:
    """Whether the tools are declared strict: ``--strict`` or ``--no-strict``, else the
    provider's default (strict for openai; not for anthropic, where not every model supports
    it)."""
    if args.strict is None:
        return bool(args.provider == "openai")
    return bool(args.strict)


def cmd_agent(args: argparse.Namespace, out: TextIO) -> int:
    endpoint = endpoint_from(args)
    with contextlib.closing(port_device(args)) as device:
        gate, session = open_gate(args, device)
        with gate:
            if not args.json:
                where = "the in-process register file" if args.port is None else args.port
                write_line(out, f"regdev agent: {escape_text(endpoint.proposer, 120)} drives "
                                f"{where} through the gate; at most {args.max_steps} calls, "
                                f"{args.retries} retry after a refusal.")
                write_line(out, f"task: {escape_text(args.task, 400)}")
                write_line(out)
            try:
                result = run_agent(endpoint, gate, args.task, session=session,
                                   max_steps=args.max_steps, retries=args.retries,
                                   on_step=lambda step: _show_step(step, args, out),
                                   on_turn=lambda turn: _show_turn(turn, args, out))
            except SchemaError as error:
                raise UsageError(f"the tools cannot be declared to {args.provider}: {error}") \
                    from None
            registers = device_call(args, gate.device.snapshot)
            _show_end(result, registers, args, out, gate.regmap)
            if not args.json:
                audit_note(gate, out)
    return 0 if result.stop == "done" else 1


def _show_turn(turn: Turn, args: argparse.Namespace, out: TextIO) -> None:
    if args.json:
        json_line({"turn": {"finish": turn.finish, "text": turn.text,
                            "calls": len(turn.calls)}}, out)
    elif turn.text:
        out.write(f"model says: {escape_text(turn.text, 300)}\n")
    out.flush()


def _show_step(step: AgentStep, args: argparse.Namespace, out: TextIO) -> None:
    if args.json:
        json_line({"turn": step.turn, "call_id": step.call.id,
                   "retry": step.retry, "raw": step.call.raw.decode("utf-8", "replace"),
                   "observation": step.observation.to_dict()}, out)
    else:
        label = f"turn {step.turn}" + (" (retry)" if step.retry else "")
        # the raw call is JSON text: shown as it is, escaped once (display_text), so that it
        # stays the JSON the model sent
        raw = display_text(step.call.raw.decode('utf-8', 'replace'), 200)
        if step.observation.code == "call-in-text":  # no call made: it was in the text
            write_line(out, f"{label:<16}wrote a call into its text: {raw}")
        else:
            write_line(out, f"{label:<16}calls {escape_text(step.call.name, 60)} {raw}")
        write_line(out, f"{'':<16}{display_text(describe(step.observation), 300)}")
    out.flush()


def _show_end(result: AgentResult, registers: list[int], args: argparse.Namespace,
              out: TextIO, regmap: RegisterMap) -> None:
    if args.json:
        json_line({"stop": result.stop, "detail": result.detail, "loop_id": result.loop_id,
                   "proposer": result.proposer}, out)
        json_line({"registers": register_rows(registers, regmap)}, out)
        return
    # the detail is a message with every quoted piece escaped already: shown as it is
    out.write(f"\nloop stopped: {result.stop} ({display_text(result.detail, 300)})\n\n")
    out.write("registers after the session:\n" + format_registers(registers, regmap) + "\n")


def model_options(p: argparse.ArgumentParser, *, max_steps: int) -> None:
    """Add the options that name a model endpoint and the loop's budget (agent and eval)."""
    p.add_argument("--provider", choices=PROVIDERS, default="openai",
                   help="the API: openai (Chat Completions, any compatible server) or "
                        "anthropic (Messages); default openai")
    p.add_argument("--model", required=True, metavar="NAME",
                   help="the model name, e.g. gpt-4.1-mini, qwen3:8b, claude-sonnet-4-5")
    p.add_argument("--base-url", metavar="URL",
                   help="the API's base URL, e.g. http://127.0.0.1:11434/v1 for ollama "
                        "(a local server needs no API key)")
    p.add_argument("--api-key-env", metavar="VAR",
                   help="the environment variable holding the API key (default "
                        "OPENAI_API_KEY or ANTHROPIC_API_KEY)")
    p.add_argument("--max-steps", type=int, default=max_steps, metavar="N",
                   help=f"the most tool calls, retries included (default {max_steps})")
    p.add_argument("--retries", type=int, default=1, metavar="N",
                   help="turns with a refused call allowed in a row after the first "
                        "(default 1)")
    p.add_argument("--temperature", type=float, metavar="T",
                   help="sampling temperature, 0..2 (Anthropic takes 0..1; default: 0 for "
                        "openai, the model's own for anthropic)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="sampling seed, where the provider honours one (openai)")
    p.add_argument("--strict", action=argparse.BooleanOptionalAction,
                   help="declare the tools with the provider's strict: true (the arguments "
                        "constrained to the schema while decoding), or without it "
                        "(--no-strict); default: strict for openai, not for anthropic (not "
                        "every model supports it). The gate checks every call either way")
    p.add_argument("--request-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="seconds to wait for one model response, 0.001..86400 (default 60)")
    p.add_argument("--max-retries", type=int, default=2, metavar="N",
                   help="the SDK's retries of 429, 5xx and lost connections, with its "
                        "backoff (default 2)")


def add_parser(sub: Any) -> None:
    """Add ``regdev agent`` to the subcommands."""
    agent = sub.add_parser(
        "agent", help="let a real model (OpenAI-compatible or Anthropic) drive the device",
        description="Give a model a task in words; every tool call it makes goes through the "
                    "gate, and each observation goes back to it as a tool result. The loop "
                    "stops when the model answers without a tool call (done), after "
                    "--max-steps calls (budget), when a refused call's retry is refused too "
                    "(rejected), or on a truncated response, a model refusal or a provider "
                    "error. OpenAI-compatible servers (OpenAI, ollama, vLLM, llama.cpp, LM "
                    "Studio, OpenRouter) are reached with --base-url. The API key is read "
                    "from the environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, or "
                    "--api-key-env) and never shown or recorded. Needs the models extra "
                    "(scripts/test installs it; see docs/models.md).")
    agent.add_argument("task", metavar="TASK", help="what the model should do, in words")
    model_options(agent, max_steps=16)
    agent.add_argument("--json", action="store_true",
                       help="one JSON object per turn and per call, then the stop and the "
                            "registers")
    device_options(agent)
    add_gate_options(agent)
    agent.set_defaults(func=cmd_agent)
