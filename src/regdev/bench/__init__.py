"""The benchmark harness of ``regdev bench`` and the scripts in ``benchmarks/``: regdev's gate
against the peers (pydantic, msgspec, jsonschema, fastjsonschema) on the same raw text, and
the one judgement of when a run's figures mean nothing. It measures the gate from outside,
so the gate never imports it."""
