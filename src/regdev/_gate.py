"""The gate: one raw tool call in, exactly one observation out.

Rules of this file:

* Stages run in order: parse, validate, execute, observe. The first refusal decides and
  nothing after it runs; nothing reaches the device unless every earlier stage passed.
* A device failure is reported as a failure (``device-timeout``, ``device-error``), never as a
  success.
* :meth:`Gate.handle` never raises: an unexpected exception becomes an ``internal-error``
  observation (and is logged), so no stack trace reaches a model.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from ._device import Device, RegisterFile
from ._errors import DeviceTimeout, RegdevError
from ._observation import Observation, Refusal
from ._parse import DEFAULT_MAX_INPUT_BYTES, MAX_ID_CHARS, check_dialect, parse
from ._schema import escape_text
from ._tools import REGISTER_TOOLS, Handler, ToolSet
from ._validate import ReferenceValidator

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "Gate"]

#: Default cap on one observation's JSON text, in bytes (8 KiB).
DEFAULT_MAX_OUTPUT_BYTES = 8 * 1024

logger = logging.getLogger("regdev")


class Gate:
    """Parse, validate and execute model tool calls against one device.

    Args:
        device: the device calls run on; a fresh in-process :class:`RegisterFile` by default.
        tools: the tools offered to callers; the register tools by default. A tool without a
            handler is validated but refused at execution as ``device-error``.
        max_input_bytes: cap on a raw call, in bytes (``too-large`` above it).
        max_output_bytes: cap on a tool result's JSON text, in bytes (``output-too-large``).

    Raises:
        ValueError: a cap is not a positive int.
    """

    def __init__(
        self,
        device: Device | None = None,
        tools: ToolSet = REGISTER_TOOLS,
        *,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        for name, cap in (("max_input_bytes", max_input_bytes),
                          ("max_output_bytes", max_output_bytes)):
            if type(cap) is not int or cap <= 0:
                raise ValueError(f"{name} must be a positive int (bytes), got {cap!r}")
        self.device: Device = device if device is not None else RegisterFile()
        self.tools = tools
        self.max_input_bytes = max_input_bytes
        self.max_output_bytes = max_output_bytes
        self._validator = ReferenceValidator(tools)

    def handle(
        self,
        raw: str | bytes,
        *,
        dialect: str = "canonical",
        tool_choice: str | None = None,
    ) -> Observation:
        """Run one raw tool call through every stage.

        Args:
            raw: the model's output, JSON text (``str`` or UTF-8 ``bytes``).
            dialect: how the call is shaped, one of :data:`regdev.DIALECTS`.
            tool_choice: when set, this step forces that tool (others are ``wrong-tool``).

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError: ``dialect`` is not one of :data:`regdev.DIALECTS`, or ``tool_choice``
                is not one of the gate's tools (checked before anything else; a programming
                error, not a model's).
        """
        self.check_options(dialect, tool_choice)
        try:
            parsed = parse(raw, dialect, max_bytes=self.max_input_bytes)
            if isinstance(parsed, Refusal):
                return Observation.refused(parsed)
            if parsed.refusal is not None:
                return Observation.refused(parsed.refusal, parsed.id)
            return self._run(parsed.call, parsed.id, tool_choice)
        except Exception:  # the gate's promise: one observation, never an exception
            return self._internal_error()

    def handle_call(
        self, call: object, *, call_id: str | None = None, tool_choice: str | None = None
    ) -> Observation:
        """Run an already-decoded canonical call (for callers that decoded JSON themselves).

        Args:
            call: ``{"tool": NAME, "arguments": {...}}`` as decoded JSON values.
            call_id: correlation id to echo in the observation.
            tool_choice: when set, this step forces that tool.

        Returns:
            Exactly one :class:`Observation`.

        Raises:
            ValueError: ``tool_choice`` is not one of the gate's tools.
        """
        self.check_options("canonical", tool_choice)
        if call_id is not None and (type(call_id) is not str or len(call_id) > MAX_ID_CHARS):
            call_id = None
        try:
            return self._run(call, call_id, tool_choice)
        except Exception:
            return self._internal_error()

    def check_options(self, dialect: str, tool_choice: str | None) -> None:
        """Raise ValueError for a dialect or a forced tool this gate cannot honour."""
        check_dialect(dialect)
        if tool_choice is not None and (type(tool_choice) is not str
                                        or tool_choice not in self.tools):
            raise ValueError(f"tool_choice {tool_choice!r} is not one of the tools offered: "
                             f"{', '.join(self.tools)}")

    def _run(self, call: object, call_id: str | None, tool_choice: str | None) -> Observation:
        refusal = self._validator.check(call, tool_choice)
        if refusal is not None:
            return Observation.refused(refusal, call_id)
        assert isinstance(call, dict)
        tool = self.tools[call["tool"]]
        arguments = tool.bind(call["arguments"])
        result = self._execute(tool.name, tool.handler, arguments)
        if isinstance(result, Refusal):
            return Observation.refused(result, call_id)
        size = len(msgspec.json.encode(result))
        if size > self.max_output_bytes:
            ran = "ran" if tool.read_only else "ran and its effect stands"
            return Observation.refused(
                Refusal("observe", "output-too-large",
                        f"{tool.name} {ran}, but its result is {size} bytes, over the cap of "
                        f"{self.max_output_bytes} bytes"),
                call_id,
            )
        return Observation.success(tool.name, result, call_id)

    def _execute(
        self, name: str, handler: Handler | None, arguments: dict[str, Any]
    ) -> dict[str, Any] | Refusal:
        if handler is None:
            return Refusal("execute", "device-error", f"tool {name} has no implementation here")
        try:
            result: dict[str, Any] = handler(self.device, arguments)
        except DeviceTimeout as error:
            return Refusal("execute", "device-timeout",
                           f"the device did not answer in time: {escape_text(str(error), 120)}")
        except RegdevError as error:
            return Refusal("execute", "device-error",
                           f"the device refused: {escape_text(str(error), 120)}")
        return result

    @staticmethod
    def _internal_error() -> Observation:
        logger.exception("regdev: unexpected error while handling a tool call")
        return Observation.refused(
            Refusal("internal", "internal-error",
                    "regdev failed while handling this call (an internal error, logged); "
                    "read the register back before retrying")
        )

    def __repr__(self) -> str:
        return f"Gate(device={self.device.identify()!r}, tools={list(self.tools)!r})"

