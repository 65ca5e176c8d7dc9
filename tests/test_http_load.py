"""Many HTTP clients on one device through `regdev serve --http` at once (the full size, 16
clients x 1000 calls with latencies against stdio, is benchmarks/http_load.py)."""

from __future__ import annotations

from pathlib import Path

from support.httpserver import inprocess_server, policy_text, post, token
from support.loadgen import RecordingDevice
from support.loadgen_http import (
    LOAD_POLICY,
    accepted_writes,
    check_load,
    check_registers,
    run_http_load,
)


def test_concurrent_http_clients_stay_correct(tmp_path: Path) -> None:
    """4 clients x 60 mixed calls at once on one device: every call answered under its own
    id; exactly one audit record per call with the verdict its client got; keyed writes run
    once and replay once; the device applied exactly the accepted writes, each client's in
    its order; each register ends with the last accepted write to it of some client."""
    device = RecordingDevice()
    with inprocess_server(tmp_path, LOAD_POLICY + policy_text().replace(
            "[registers]\nread_only = [0]\nprotected = [15]\n", ""), stateless=True,
                          device=device) as served:
        load = run_http_load(served.url, token("alice"), clients=4, calls=60)
        assert load.total == 240
        assert post(served.url, b"{}", bearer=token("alice")).status_code == 400
    check_load(load, served.audit)
    accepted = accepted_writes(load)
    applied = [(addr, data) for _, addr, data in device.applied]
    assert sorted(applied) == sorted(w for writes in accepted.values() for w in writes)
    for writes in accepted.values():  # each client's writes, in its order, within the device's
        it = iter(applied)
        assert all(write in it for write in writes)
    check_registers(load, device.snapshot())
