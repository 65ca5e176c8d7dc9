"""The reliability run at full size: 3 ``regdev serve --http --stateless --fleet`` processes
on one PostgreSQL store behind nginx, a Modbus TCP device and a serial pty device (its line
leased to one process at a time), keyed writes retried onto other processes while the serial
line's owner is SIGKILLed, twice, and the writes to protected register 15 approved on their
pages through nginx by an approver thread, many through another process than the one that
asked.

The same run as ``tests/test_processes.py`` (which runs it at a size that fits CI), at the
full size by default: 16 clients x 500 keyed writes, to the two devices in turn. Prints the
calls sent, those acknowledged (in all, and of the serial device after the last kill: the
line taken over), the acknowledged writes without a record (must be 0), the keyed writes
executed twice (must be 0: a retry of a key stored for the Modbus device, which cannot say
its reset epoch, is refused ``idempotency-unconfirmed``), the refusals ``line-elsewhere``
(a serial call landing on a process not owning the line; the client sends it again), the
writes to register 15 run on the approver's yes (one run without it fails the run) and those
denied (the register changed while the question was open), the
approval questions asked and the approver's answers (by HTTP status), those answered through
another process than the one that asked (the asking process's log says ``approval needed``,
the answering one's ``approval question ID (asked by another process) answered by``), and the
acknowledged writes per second. Run::

    .venv/bin/python benchmarks/processes_reliability.py [--clients 16] [--calls 500] [--json]

It starts PostgreSQL and nginx of its own on 127.0.0.1 (``tests/support/pgserver.py``,
``tests/support/nginxserver.py``; both must be installed: ``apt-get install postgresql nginx``).
Exit status 1 when an invariant fails.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _script import Parser, count, need


def main() -> int:
    paragraphs = __doc__.split("\n\n")
    parser = Parser(description=paragraphs[0].replace("``", "`"),  # the whole first one
                    epilog=paragraphs[-1].replace("``", "`"))  # what it needs, its status
    parser.add_argument("--clients", type=count(1, 64), default=16, metavar="N",
                        help="client threads: 1..64 (default 16)")
    parser.add_argument("--calls", type=count(1, 100_000), default=500, metavar="N",
                        help="keyed writes per client: 1..100000 (default 500)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    need("dev", "psycopg", "pytest", "mcp", "pymodbus")
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "tests"))
    sys.path.insert(0, str(root / "firmware-sim"))  # the serial device's simulator
    from support import pgserver  # noqa: PLC0415 - the tests' harness
    from test_processes import reliability_run  # noqa: PLC0415

    try:
        with pgserver.started() as server, tempfile.TemporaryDirectory() as folder:
            run = reliability_run(Path(folder), server.fresh_dsn(), clients=args.clients,
                                  calls=args.calls)
    except pgserver.Missing as error:
        print(f"{Path(sys.argv[0]).name}: {error}", file=sys.stderr)
        return 2
    figures = {"calls": run.calls, "acknowledged": len(run.acknowledged),
               "acknowledged_without_record": len(run.unrecorded()),
               "executed_twice": len(run.executed_twice()),
               "serial_acknowledged_after_kills": run.serial_after_kills,
               "line_elsewhere_refusals": len(run.elsewhere),
               "unconfirmed_refusals": sum(1 for r in run.records
                                           if r.code == "idempotency-unconfirmed"),
               "unacknowledged_by_last_answer": dict(run.unacknowledged),
               "protected_writes_approved_and_run": sum(
                   1 for r in run.protected() if r.ok and r.approval is not None),
               "protected_writes_denied": sum(1 for r in run.protected()
                                              if r.code == "approval-denied"),
               "protected_writes_run_without_approval": len(run.unapproved()),
               "approval_questions_asked": len(run.asked_by),
               "approval_answers_by_http_status": dict(run.answers),
               "approvals_answered_through_another_process": len(run.answered_elsewhere()),
               "seconds": run.seconds,
               "acknowledged_per_second": len(run.acknowledged) / run.seconds}
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"{args.clients} clients x {args.calls} keyed writes to 2 devices, 3 processes "
              "behind nginx, the serial line's owner SIGKILLed mid-run twice, register 15's "
              "writes approved through nginx")
        for name, value in figures.items():
            print(f"  {name.replace('_', ' ')}: {value:.1f}" if isinstance(value, float)
                  else f"  {name.replace('_', ' ')}: {value}")
    return 1 if figures["acknowledged_without_record"] or figures["executed_twice"] \
        or not figures["serial_acknowledged_after_kills"] \
        or figures["protected_writes_run_without_approval"] else 0


if __name__ == "__main__":
    sys.exit(main())
