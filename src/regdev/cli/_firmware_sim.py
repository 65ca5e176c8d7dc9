"""``regdev firmware-sim``: the simulated device on a pty or a TCP port."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import textwrap
from types import ModuleType
from typing import Any, TextIO

from .._files import FIRMWARE_SIMULATOR, DataFileError, firmware_file
from ._common import (
    UsageError,
    exit_status_epilog,
    read_map,
)


def _firmware_sim_module() -> ModuleType:
    """The firmware simulator, ``firmware-sim/regdev_firmware_sim.py`` where regdev is
    installed (its data files: regdev/_files.py)."""
    if "regdev_firmware_sim" in sys.modules:
        return sys.modules["regdev_firmware_sim"]
    try:
        path = firmware_file(FIRMWARE_SIMULATOR)
    except DataFileError as error:
        raise UsageError(str(error)) from None
    spec = importlib.util.spec_from_file_location("regdev_firmware_sim", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load the firmware simulator from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


#: What each fault kind of ``--fault KIND=RATE`` does to a reply (the simulator's docstring).
FAULT_HELP = {
    "drop": "one byte of the reply is lost (the host sees a bad or short frame)",
    "corrupt": "one byte of the reply is changed (the host sees a checksum or syntax error)",
    "delay": "the reply is sent --delay SECONDS late (past the host's --timeout)",
    "garbage": "1..20 random bytes are sent before the reply, between frames",
    "disconnect": "the link is cut instead of replying (TCP: the socket is closed; pty: a "
                  "new pty replaces the old one, at --link PATH)",
    "busy": "the device answers `e BUSY` (Modbus: exception 06) and does not run the request",
}


def cmd_firmware_sim(args: argparse.Namespace, out: TextIO) -> int:
    module = _firmware_sim_module()
    if {"-h", "--help"} & set(args.args):  # the simulator's help, with what each fault does
        parser = module.build_parser("regdev firmware-sim")
        parser.epilog = None
        width = max(shutil.get_terminal_size().columns - 2, 40)  # as argparse wraps
        out.write(parser.format_help() + "\n" + textwrap.fill(
            "fault kinds (--fault KIND=RATE): at most one fault per reply; a request runs "
            "before its reply is faulted (except busy), so a write whose reply is lost has "
            "happened.", width) + "\n")
        for kind in module.FAULT_KINDS:
            out.write(textwrap.fill(FAULT_HELP[kind], width, initial_indent=f"  {kind:<12}",
                                    subsequent_indent=" " * 14) + "\n")
        out.write("\nexample: regdev firmware-sim --pty --fault drop=0.05,corrupt=0.02 "
                  "--seed 7 -v\n         regdev firmware-sim --modbus-tcp 127.0.0.1:0 (Modbus; "
                  "docs/modbus.md)\n\n" + textwrap.fill(exit_status_epilog("firmware-sim"), width)
                  + "\n")
        return 0
    regmap = None
    path = _map_path(args.args)
    if path is not None:  # read here: SystemRDL too, which the simulator alone cannot
        regmap = read_map(path)
    status: int = module.main(args.args, prog="regdev firmware-sim", regmap=regmap)
    return status


def _map_path(words: list[str]) -> str | None:
    """The FILE of ``--map FILE`` or ``--map=FILE`` among the simulator's arguments (the
    last one given), else None."""
    found = None
    for index, word in enumerate(words):
        if word == "--map" and index + 1 < len(words):
            found = words[index + 1]
        elif word.startswith("--map="):
            found = word.removeprefix("--map=")
    return found


def add_parser(sub: Any) -> None:
    """Add ``regdev firmware-sim`` to the subcommands."""
    sim = sub.add_parser(
        "firmware-sim", add_help=False, prefix_chars="+",
        help="serve the simulated device on a pty or a TCP port, in regdev's protocol or as a "
             "Modbus device (--help for its options)",
        description="The device side of docs/protocol.md, or a Modbus device (docs/modbus.md), "
                    "with seeded fault injection.")
    sim.add_argument("args", nargs=argparse.REMAINDER)
    sim.set_defaults(func=cmd_firmware_sim)
