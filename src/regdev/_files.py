"""Where regdev's data files are: the firmware simulators, the C firmware, and the examples.

They are folders of the repository, ``firmware-sim/`` and ``examples/``, which the build maps
into the package as ``regdev._firmware`` and ``regdev._examples`` (``package-dir`` in
pyproject.toml): a wheel carries them inside the package, where :mod:`importlib.resources`
finds them. An editable install (a clone's ``.venv``) has them where the clone keeps them:
setuptools' editable finder does not find a mapped subpackage that has no ``__init__.py``,
so there they are taken beside ``src/``. This module is the one place that asks.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

__all__ = ["FIRMWARE_SIMULATOR", "DataFileError", "example", "examples", "firmware_file"]

#: The Python simulator of regdev's protocol, a file of ``firmware-sim/`` (stdlib only).
FIRMWARE_SIMULATOR = "regdev_firmware_sim.py"


class DataFileError(LookupError):
    """A data file regdev ships is missing: the installation is incomplete (the message names
    the file and says how to mend it)."""


def _folder(package: str, folder: str) -> Traversable:
    """The folder of ``package`` (``regdev._firmware`` or ``regdev._examples``) where regdev
    is installed, else the repository's ``folder`` beside ``src/`` (an editable install).

    Raises:
        DataFileError: neither is there (an incomplete installation).
    """
    try:
        return files(package)
    except ModuleNotFoundError:
        tree = Path(__file__).resolve().parents[2] / folder
        if tree.is_dir():
            return tree
    raise DataFileError(f"{folder}/ is missing from this installation of regdev; reinstall "
                        "it (pip install --force-reinstall regdev)")


def _on_disk(entry: Traversable, shown: str) -> Path:
    """``entry`` as a path of the filesystem (the simulators run and the firmware builds from
    there, so a package in a zip file cannot serve).

    Raises:
        DataFileError: the file is not there, or not on the filesystem.
    """
    if not isinstance(entry, Path) or not entry.exists():
        raise DataFileError(f"{shown} is missing from this installation of regdev; reinstall "
                            "it (pip install --force-reinstall regdev)")
    return entry


def firmware_file(name: str) -> Path:
    """A file (or folder) of the firmware: ``regdev_firmware_sim.py`` (which finds the Modbus
    simulator beside it) or ``c`` (the C firmware's Makefile, sources and committed image).

    Raises:
        DataFileError: it is missing (an incomplete installation).
    """
    return _on_disk(_folder("regdev._firmware", "firmware-sim").joinpath(name),
                    f"firmware-sim/{name}")


def example(name: str) -> Path:
    """A file of the examples, e.g. ``sensor.rdl`` or ``eval-tasks.jsonl``.

    Raises:
        DataFileError: it is missing (an incomplete installation, or a name that is not one).
    """
    return _on_disk(_folder("regdev._examples", "examples").joinpath(name), f"examples/{name}")


def examples() -> list[Path]:
    """The example files (maps, eval tasks, recorded calls, policies), sorted by name.

    Raises:
        DataFileError: the examples folder is missing (an incomplete installation).
    """
    folder = _folder("regdev._examples", "examples")
    try:
        found = [entry for entry in folder.iterdir()
                 if entry.is_file() and not entry.name.startswith(".")]
    except OSError:
        found = []
    if not found:
        raise DataFileError("examples/ is missing from this installation of regdev; reinstall "
                            "it (pip install --force-reinstall regdev)")
    return sorted((_on_disk(entry, f"examples/{entry.name}") for entry in found),
                  key=lambda path: path.name)
