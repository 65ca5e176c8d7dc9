"""scripts/_env.sh: the first setup, an interrupted one, and a half-made .venv, on a stand-in
project (a copy of the script beside a one-module project with an in-tree build backend), so
that nothing is downloaded (pip runs with --no-index) and the real .venv is never touched.

The script runs with PYTHON set to a stand-in python: the real one, except that its
``-m venv DIR`` makes the venv without running ensurepip and gives it this test run's own
pip through a ``.pth`` file (seconds of CPU less per venv on a shared machine). What is
under test is the script's logic: when it makes, checks, repairs and reports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pip
import pytest

from conftest import ROOT, default_signals

pytestmark = [pytest.mark.skipif(os.name != "posix" or shutil.which("bash") is None,
                                 reason="the scripts are bash"),
              pytest.mark.timeout(240)]

# A PEP 517 backend in the project itself (backend-path), so pip builds it offline: a wheel
# with the module `tiny`, for a normal and for an editable install. It sends Ctrl-C to its
# process group, once, when STANDIN_CTRL_C_IN_PIP names a file that does not exist yet.
BACKEND = '''
import base64, hashlib, os, signal, time, zipfile

NAME = "tiny-0.1"


def _interrupt_once():
    flag = os.environ.get("STANDIN_CTRL_C_IN_PIP")
    if flag and not os.path.exists(flag):
        open(flag, "w").close()
        os.killpg(0, signal.SIGINT)
        time.sleep(30)


def _wheel(directory, files):
    files = dict(files)
    files[NAME + ".dist-info/METADATA"] = "Metadata-Version: 2.1\\nName: tiny\\nVersion: 0.1\\n"
    files[NAME + ".dist-info/WHEEL"] = ("Wheel-Version: 1.0\\nGenerator: stand-in\\n"
                                        "Root-Is-Purelib: true\\nTag: py3-none-any\\n")
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(NAME + ".dist-info/RECORD,,")
    files[NAME + ".dist-info/RECORD"] = "\\n".join(record) + "\\n"
    wheel = NAME + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, wheel), "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _interrupt_once()
    return _wheel(wheel_directory, {"tiny.py": "VALUE = 1\\n"})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _interrupt_once()
    return _wheel(wheel_directory, {"tiny.pth": os.getcwd() + "\\n"})
'''

PYPROJECT = """
[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "tiny"
version = "0.1"
"""

# The stand-in python. `-m venv DIR` makes the venv without pip (as an interrupted venv
# leaves it: ensurepip runs last), then either adds pip from PIP_FOLDER or, the first time
# STANDIN_CTRL_C_IN_VENV names a file that does not exist yet, lets Ctrl-C reach its whole
# process group, as from a terminal. Anything else runs the real python.
FAKE_PYTHON = f"""#!{sys.executable}
import os, signal, subprocess, sys, sysconfig, time
real = {sys.executable!r}
if sys.argv[1:3] != ["-m", "venv"]:
    os.execv(real, [real, *sys.argv[1:]])
venv = sys.argv[-1]
subprocess.run([real, "-m", "venv", "--without-pip", venv], check=True)
flag = os.environ.get("STANDIN_CTRL_C_IN_VENV")
if flag and not os.path.exists(flag):
    open(flag, "w").close()
    os.killpg(0, signal.SIGINT)
    time.sleep(30)
site = sysconfig.get_path("purelib", vars={{"base": venv, "platbase": venv}})
with open(os.path.join(site, "standin-pip.pth"), "w") as pth:
    pth.write(os.environ["PIP_FOLDER"] + "\\n")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A stand-in project with scripts/_env.sh, and no .venv yet; the stand-in python and a
    folder holding this run's pip beside it."""
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    pip_folder = tmp_path / "pip-only"
    pip_folder.mkdir()
    (pip_folder / "pip").symlink_to(Path(pip.__file__).parent)
    root = tmp_path / "project"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "_env.sh", root / "scripts" / "_env.sh")
    (root / "backend.py").write_text(BACKEND)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "tiny.py").write_text("VALUE = 1\n")
    return root


def setup(project: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Source _env.sh as scripts/demo does, in its own session (so a Ctrl-C it gets goes
    nowhere else), with the stop signals at their defaults (as from a terminal, whatever this
    process has), offline, with the stand-in python; then print the installed module's
    value."""
    command = '. scripts/_env.sh ""; "$VENV/bin/python" -c "import tiny; print(tiny.VALUE)"'
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL"))}
    environment.update(PIP_NO_INDEX="1", PYTHON=str(project.parent / "python3"),
                       PIP_FOLDER=str(project.parent / "pip-only"), **env)
    bash = shutil.which("bash") or "/bin/bash"
    # SIGINT at its default (ignored as a background job's, bash could not trap it)
    return subprocess.run(default_signals([bash, "-c", command]), cwd=project, env=environment,
                          text=True, capture_output=True, timeout=200, start_new_session=True,
                          check=False)


def assert_ready(done: subprocess.CompletedProcess[str], project: Path) -> None:
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    assert done.stderr.splitlines()[-1] == "regdev: environment ready."
    assert (project / ".venv" / ".regdev-installed").is_file()
    assert "Traceback" not in done.stderr


def _without_pip(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)


def _broken_pip(venv: Path) -> None:
    _without_pip(venv)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv),
                                                     "platbase": str(venv)}))
    (site / "pip").mkdir()
    (site / "pip" / "__init__.py").write_text("raise ImportError('half written')\n")


def _python_gone(venv: Path) -> None:
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(venv / "no-such-python")


#: Half-made environments, as an interrupted or failed setup leaves them.
HALF_MADE: dict[str, Callable[[Path], None]] = {
    "no pip (venv interrupted in ensurepip)": _without_pip,
    "pip half written": _broken_pip,
    "an empty folder": lambda venv: venv.mkdir(),
    "python missing": _python_gone,
}


@pytest.mark.parametrize("state", list(HALF_MADE))
def test_a_half_made_environment_is_made_again(project: Path, state: str) -> None:
    """Whatever an interrupted setup left in .venv, the next run makes it again and
    installs, instead of failing with "No module named pip" on every run."""
    HALF_MADE[state](project / ".venv")
    done = setup(project)
    assert_ready(done, project)
    assert done.stderr.startswith(
        f"regdev: {project}/.venv is incomplete (no working pip: an earlier setup was "
        "interrupted?); making it again\n"), done.stderr


@pytest.mark.parametrize("where", ["venv", "pip"])
def test_ctrl_c_during_setup_is_one_line_and_the_next_run_finishes(
        project: Path, tmp_path: Path, where: str) -> None:
    """Ctrl-C while the venv is made, or while pip installs: one line, status 130, no
    traceback; the next run completes the environment."""
    flags = {"STANDIN_CTRL_C_IN_VENV": str(tmp_path / "venv-interrupted"),
             "STANDIN_CTRL_C_IN_PIP": str(tmp_path / "pip-interrupted")}
    if where == "venv":
        (tmp_path / "pip-interrupted").touch()  # only the venv step is interrupted
    else:
        (tmp_path / "venv-interrupted").touch()
    interrupted = setup(project, **flags)
    assert (tmp_path / f"{where}-interrupted").exists()  # the Ctrl-C came where meant
    assert interrupted.returncode == 130, interrupted.stderr
    assert interrupted.stdout == ""
    assert interrupted.stderr.splitlines()[-1] == (
        "regdev: setup interrupted; the next run takes it up again")
    assert "Traceback" not in interrupted.stderr
    assert len(interrupted.stderr.splitlines()) == 2  # "setting up ...", then that line
    again = setup(project, **flags)
    assert_ready(again, project)


def test_the_first_setup_and_a_later_run(project: Path) -> None:
    """The first run makes .venv and says so; a later one says nothing and starts at once."""
    first = setup(project)
    assert_ready(first, project)
    assert first.stderr.startswith(f"regdev: setting up {project}/.venv with Python ")
    later = setup(project)
    assert (later.returncode, later.stdout, later.stderr) == (0, "1\n", "")
