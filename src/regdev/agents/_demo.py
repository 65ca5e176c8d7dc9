"""The demo session: a scripted proposer and the calls it makes.

The script shows, in order: accepted calls, a refused call corrected on its retry, and a
refusal whose retry is refused too, which stops the loop with ``rejected``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core._observation import Observation

__all__ = ["DEMO_SCRIPT", "DEMO_STOP", "SENSOR_DEMO_NAMES", "SENSOR_DEMO_SCRIPT",
           "ScriptedProposer"]

#: ``(what the model is doing, its raw output, the verdict the script expects)`` in canonical
#: dialect; the verdict is ``"ok"`` or a refusal's code, None for the step that is never sent.
DEMO_SCRIPT: tuple[tuple[str, str, str | None], ...] = (
    ("read register 0",
     '{"tool": "read_register", "arguments": {"addr": 0}}', "ok"),
    ("write 0xA5 to register 0",
     '{"tool": "write_register", "arguments": {"addr": 0, "data": 165}}', "ok"),
    ("write 300 to register 1 (too big for 8 bits)",
     '{"tool": "write_register", "arguments": {"addr": 1, "data": 300}}', "range-data"),
    ("retry with 255",
     '{"tool": "write_register", "arguments": {"addr": 1, "data": 255}}', "ok"),
    ("write 0x42 to register 2, sent as 66.0 (an integer in JSON Schema)",
     '{"tool": "write_register", "arguments": {"addr": 2, "data": 66.0}}', "ok"),
    ("read register 1 back",
     '{"tool": "read_register", "arguments": {"addr": 1}}', "ok"),
    ("write to register \"7\" (a string, not an integer)",
     '{"tool": "write_register", "arguments": {"addr": "7", "data": 1}}', "type-addr"),
    ("retry with register 16 (there are only 0..15)",
     '{"tool": "write_register", "arguments": {"addr": 16, "data": 1}}', "range-addr"),
    ("never sent: the loop stops when the retry is refused",
     '{"tool": "write_register", "arguments": {"addr": 15, "data": 1}}', None),
)
#: How each scripted session (DEMO_SCRIPT, SENSOR_DEMO_SCRIPT) ends when every step gets the
#: verdict the script expects.
DEMO_STOP = "rejected"


#: The demo of a register map: ``regdev demo --map examples/sensor.rdl``. Fields by name, a
#: wrong enumerated value corrected on its retry, reserved bits, write-1-to-clear, a block
#: write and read, and a write to a read-only register, which stops the loop (a final
#: refusal).
SENSOR_DEMO_SCRIPT: tuple[tuple[str, str, str | None], ...] = (
    ("read the ID register, by name",
     '{"tool": "read_fields", "arguments": {"register": "ID"}}', "ok"),
    ("set CTRL.MODE to FAST (the sensor has no such mode)",
     '{"tool": "write_field", "arguments": {"field": "CTRL.MODE", "value": "FAST"}}',
     "field-value"),
    ("retry with CONTINUOUS",
     '{"tool": "write_field", "arguments": {"field": "CTRL.MODE", "value": "CONTINUOUS"}}', "ok"),
    ("set CTRL.EN to 1: MODE keeps its value (one masked write)",
     '{"tool": "write_field", "arguments": {"field": "CTRL.EN", "value": 1}}', "ok"),
    ("read STATUS: the power-on flag POR is set",
     '{"tool": "read_register", "arguments": {"addr": 2}}', "ok"),
    ("clear STATUS.POR by writing 1 (write 1 to clear)",
     '{"tool": "write_field", "arguments": {"field": "STATUS.POR", "value": 1}}', "ok"),
    ("write 0x2D to CTRL (bit 3 is reserved)",
     '{"tool": "write_register", "arguments": {"addr": 1, "data": 45}}', "reserved-bits"),
    ("retry with 0x25: EN=1, MODE=CONTINUOUS, RATE=HZ16",
     '{"tool": "write_register", "arguments": {"addr": 1, "data": 37}}', "ok"),
    ("write the four DATA registers at once (all or nothing)",
     '{"tool": "write_registers", "arguments": {"addr": 4, "data": [16, 32, 48, 64]}}', "ok"),
    ("read them back at once",
     '{"tool": "read_registers", "arguments": {"addr": 4, "count": 4}}', "ok"),
    ("write the read-only ID register (refused for good: the loop stops)",
     '{"tool": "write_register", "arguments": {"addr": 0, "data": 1}}', "read-only-register"),
    ("never sent: the loop stopped",
     '{"tool": "read_fields", "arguments": {"register": "STATUS"}}', None),
)
#: The register and field names :data:`SENSOR_DEMO_SCRIPT` uses (a map without them cannot
#: run it).
SENSOR_DEMO_NAMES = ("ID", "CTRL.MODE", "CTRL.EN", "STATUS.POR", "DATA[3]")


class ScriptedProposer:
    """A proposer that returns fixed raw outputs in order, then None (done).

    Args:
        outputs: the raw outputs, first to last.
    """

    def __init__(self, outputs: Sequence[str | bytes]) -> None:
        self._outputs = list(outputs)
        self.calls = 0

    def __call__(self, observations: Sequence[Observation]) -> str | bytes | None:
        """Return the next output, or None when the script is spent."""
        if self.calls >= len(self._outputs):
            return None
        self.calls += 1
        return self._outputs[self.calls - 1]
