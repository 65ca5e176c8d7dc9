"""What users install: the wheel and the sdist, each built as a release is (``python -m build``)
and installed into a fresh virtual environment outside the source tree, then every command's
smoke path run from an empty folder. The slow part is marked ``install`` (``scripts/test -m
install`` runs it alone); the build is done once for both. Then the quick checks of the
packaging: the package list, the data files found through importlib.resources, the AVR build
folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client, StdioServerParameters, stdio_client

import regdev_firmware_sim as sim
from conftest import EXAMPLES, ROOT, run
from regdev import __version__, _files
from support.firmware_c import missing
from support.provider_server import ProviderServer
from support.recorded_models import responder

#: What the fresh environments install: the extras the smoke paths need (serve, the SystemRDL
#: example map, eval's model endpoint).
EXTRAS = "mcp,rdl,models"
#: Seconds any one command of a smoke path may take (generous: a loaded machine).
COMMAND_TIMEOUT = 240
#: The firmware's files the wheel must carry (besides its Python modules).
FIRMWARE_FILES = ("c/Makefile", "c/gen_regmap.py", "c/regdev-uno.hex", "c/src/regdev_core.c",
                  "c/avr/main.c", "c/host/main.c", "c/sim/harness.c")


# --- the quick checks ------------------------------------------------------------------------

def test_package_list_names_every_package() -> None:
    """pyproject.toml's package list names every package under src/regdev, and the two data
    folders mapped into it (a package missing there would be missing from the wheel)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    found = sorted(".".join(init.parent.relative_to(ROOT / "src").parts)
                   for init in (ROOT / "src" / "regdev").rglob("__init__.py"))
    assert sorted(setuptools["packages"]) == sorted([*found, "regdev._firmware",
                                                     "regdev._examples"])
    assert setuptools["package-dir"] == {"": "src", "regdev._firmware": "firmware-sim",
                                         "regdev._examples": "examples"}


def test_no_module_of_the_package_imports_itself_back() -> None:
    """No import cycle among regdev's modules (TYPE_CHECKING imports count): the strongly
    connected components of grimp's import graph are single modules."""
    import grimp  # noqa: PLC0415 - import-linter's graph builder (the dev extra)

    graph = grimp.build_graph("regdev", cache_dir=None)
    modules = sorted(graph.modules)
    cycles = [(module, other) for module in modules for other in modules
              if module < other and graph.chain_exists(module, other)
              and graph.chain_exists(other, module)
              and "regdev" not in (module, other)]  # the root package re-exports
    assert cycles == []


def test_the_public_policy_is_the_gates_with_the_servers_tables() -> None:
    """regdev.Policy adds the server's [http] and [approval] tables to the gate's policy,
    which knows nothing of them."""
    from regdev import Policy  # noqa: PLC0415
    from regdev.gate._policy import Policy as GatePolicy  # noqa: PLC0415

    assert issubclass(Policy, GatePolicy)
    assert {"http", "approval"} & set(GatePolicy.model_fields) == set()
    assert set(Policy.model_fields) - set(GatePolicy.model_fields) == {"http", "approval"}


def test_data_files_are_found_through_importlib_resources() -> None:
    """The editable install finds firmware-sim/ and examples/ where the repository keeps
    them, as regdev._firmware and regdev._examples."""
    assert _files.firmware_file("regdev_firmware_sim.py") == ROOT / "firmware-sim" / \
        "regdev_firmware_sim.py"
    assert _files.firmware_file("c") == ROOT / "firmware-sim" / "c"
    assert _files.example("sensor.rdl") == EXAMPLES / "sensor.rdl"
    assert _files.examples() == sorted(path for path in EXAMPLES.iterdir()
                                       if not path.name.startswith("."))
    with pytest.raises(_files.DataFileError, match=r"^examples/nope\.rdl is missing from this "
                                                   r"installation of regdev; reinstall it"):
        _files.example("nope.rdl")


def test_map_examples_lists_the_installed_examples(capsys: pytest.CaptureFixture[str]) -> None:
    """`regdev map --examples` prints each example file's path, one a line; with a FILE, or
    with neither, it is a one-line usage error."""
    status, out, err = run(capsys, "map", "--examples")
    assert (status, err) == (0, "")
    assert out.splitlines() == [str(path) for path in _files.examples()]
    assert str(EXAMPLES / "sensor.rdl") in out.splitlines()
    assert run(capsys, "map", "--examples", "x.rdl") == (
        2, "", "regdev map: error: --examples takes no FILE, --json or --output\n")
    assert run(capsys, "map") == (
        2, "", "regdev map: error: give a register map FILE (.rdl or .json), --examples "
               "for the shipped ones, or --sunspec-discover URL\n")


def test_avr_builds_in_the_xdg_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`firmware-sim --avr` builds under $XDG_CACHE_HOME/regdev (a relative one is ignored,
    as the XDG spec says), one folder per copy of the firmware, never beside the sources."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = sim.avr_cache()
    assert folder.parent == tmp_path / "regdev"
    assert folder.name.startswith("firmware-") and len(folder.name) == len("firmware-") + 12
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert sim.avr_cache().parent == Path.home() / ".cache" / "regdev"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert sim.avr_cache().parent == Path.home() / ".cache" / "regdev"


# --- what users install ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built once as a release is: ``python -m build`` makes the
    sdist from the tree, then the wheel from the unpacked sdist. In a git checkout the tree
    is a copy of the tracked files as the working tree holds them: the other test workers
    write into the live tree (audit logs, caches, build folders) while setuptools lists and
    links its files (one build failed with a file of the tree missing under it), and a
    release is made of tracked files."""
    out = tmp_path_factory.mktemp("dist")
    source, tracked = ROOT, _tracked()
    if tracked is not None:
        source = tmp_path_factory.mktemp("source")
        for name in tracked:
            if (ROOT / name).is_file():  # (a tracked file deleted in the working tree is not)
                (source / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,) = out.glob("regdev-*.tar.gz")
    (wheel,) = out.glob("regdev-*.whl")
    return {"sdist": sdist, "wheel": wheel}


def _tracked() -> list[str] | None:
    """The repository's tracked files, or None outside a git checkout (an unpacked sdist)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    done = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                          check=False)
    return done.stdout.decode().strip("\0").split("\0") if done.returncode == 0 else None


@pytest.mark.install
@pytest.mark.timeout(900)
def test_sdist_and_wheel_carry_everything(dist: dict[str, Path]) -> None:
    """The sdist holds every tracked file (sources, firmware, examples, docs, tests,
    benchmarks) and nothing a clone makes; the wheel holds the package, the simulators, the
    C firmware with its image, and the examples, and no tests or build folders."""
    with tarfile.open(dist["sdist"]) as tar:
        names = {str(PurePosixPath(*PurePosixPath(name).parts[1:])) for name in tar.getnames()}
    for folder in ("src/regdev", "firmware-sim/c", "examples", "docs", "tests", "benchmarks"):
        assert any(name.startswith(folder + "/") for name in names), folder
    assert not [name for name in names if "__pycache__" in name or "/c/build" in name]
    tracked = _tracked()
    if tracked is not None:
        assert sorted(set(tracked) - names) == []
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        inside = set(wheel.namelist())
    for name in FIRMWARE_FILES:
        assert f"regdev/_firmware/{name}" in inside, name
    assert {"regdev/_firmware/regdev_firmware_sim.py", "regdev/_firmware/regdev_modbus_sim.py",
            "regdev/py.typed", "regdev/__main__.py"} <= inside
    shipped = {path.name for path in EXAMPLES.iterdir() if not path.name.startswith(".")}
    assert {name.removeprefix("regdev/_examples/") for name in inside
            if name.startswith("regdev/_examples/")} == shipped
    assert not [name for name in inside if name.startswith("tests/") or "/build/" in name]
    (metadata,) = [name for name in inside if name.endswith(".dist-info/METADATA")]
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        text = wheel.read(metadata).decode()
    assert f"Version: {__version__}\n" in text
    assert "Project-URL: Changelog, " in text and "Provides-Extra: mcp\n" in text


@contextmanager
def fresh_venv(where: Path, *install: str) -> Iterator[Path]:
    """A new virtual environment at ``where`` with ``install`` (pip arguments) in it, made
    by this environment's pip (so the new one needs none of its own); yields its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True,
                   timeout=COMMAND_TIMEOUT)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(where / "bin" / "python"),
                           "install", "--quiet", "--disable-pip-version-check", *install],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    yield where / "bin"


class Smoke:
    """Runs an installed regdev's commands from an empty folder, with HOME, the XDG folders
    and the audit log under ``tmp``, and nothing of this tree on the path."""

    def __init__(self, bin_: Path, tmp: Path) -> None:
        tmp.mkdir(exist_ok=True)
        self.bin = bin_
        self.work = tmp / "work"
        self.work.mkdir()
        self.audit = tmp / "audit.db"
        self.cache = tmp / "cache"
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "REGDEV_AUDIT", "PYTHONHOME")}
        self.env = {**env, "HOME": str(tmp / "home"), "XDG_STATE_HOME": str(tmp / "state"),
                    "XDG_CACHE_HOME": str(self.cache),
                    "PATH": f"{bin_}{os.pathsep}{env.get('PATH', '')}"}

    def popen(self, *argv: str) -> subprocess.Popen[str]:
        """``regdev ARGV`` started, its stdout and stderr piped."""
        return subprocess.Popen([str(self.bin / "regdev"), *argv], cwd=self.work, env=self.env,
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def run(self, *argv: str, stdin: str = "", status: int = 0) -> str:
        """``regdev ARGV`` (``python ...`` when argv[0] is python): its stdout, once it
        exited with ``status``."""
        command = [str(self.bin / argv[0]), *argv[1:]] if argv[0] == "python" else \
            [str(self.bin / "regdev"), *argv]
        done = subprocess.run(command, cwd=self.work, env=self.env, input=stdin,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT,
                              check=False)
        assert done.returncode == status, (argv, done.stdout[-2000:], done.stderr[-2000:])
        return done.stdout


def smoke_data_files(smoke: Smoke) -> tuple[Path, list[str]]:
    """The commands that use the package's data files: the version, the examples' list, the
    demo on the default and the example map, the simulator on a pty with the shell against
    it. Returns the installed package's folder and the examples' paths."""
    audit = ["--audit", str(smoke.audit)]
    assert smoke.run("python", "-m", "regdev", "--version") == f"regdev {__version__}\n"

    # the examples are installed with the package, and regdev says where
    listed = smoke.run("map", "--examples").splitlines()
    site = subprocess.run([str(smoke.bin / "python"), "-c",
                           "import regdev; print(regdev.__file__)"], capture_output=True,
                          text=True, check=True, cwd=smoke.work, env=smoke.env).stdout.strip()
    package = Path(site).parent
    assert [Path(line).name for line in listed] == sorted(
        path.name for path in EXAMPLES.iterdir() if not path.name.startswith("."))
    assert all(Path(line).parent == package / "_examples" for line in listed), listed
    sensor, = (line for line in listed if line.endswith("sensor.rdl"))
    assert "loop stopped: rejected" in smoke.run("demo", *audit)
    assert "loop stopped" in smoke.run("demo", "--map", sensor, *audit)

    # the Python simulator on a pty, the shell against it
    simulator = smoke.popen("firmware-sim", "--pty")
    try:
        assert simulator.stdout is not None
        port = simulator.stdout.readline().strip()
        assert port.startswith("/dev/"), simulator.stderr.read() if simulator.stderr else ""
        said = smoke.run("shell", "--port", port, "--no-audit", stdin="write 3 255\nread 3\n")
        assert "register 3 = 0xff (255)" in said
    finally:
        simulator.terminate()
        simulator.communicate(timeout=COMMAND_TIMEOUT)
    return package, listed


def smoke_every_command(bin_: Path, tmp: Path) -> None:
    """The smoke path of every command, from an empty folder, against the installed regdev."""
    smoke = Smoke(bin_, tmp)
    audit = ["--audit", str(smoke.audit)]
    package, listed = smoke_data_files(smoke)
    sensor, = (line for line in listed if line.endswith("sensor.rdl"))
    wild, = (line for line in listed if line.endswith("wild-calls.jsonl"))
    table = smoke.run("map", sensor)
    assert "CTRL" in table and "STATUS" in table
    smoke.run("map", sensor, "--json", "-o", "sensor.json")
    assert json.loads((smoke.work / "sensor.json").read_text())["format"] == "regdev-map"
    tools = json.loads(smoke.run("tools"))
    assert [tool["name"] for tool in tools] == ["write_register", "read_register"]
    assert "18 calls, 18 with expectations, 0 not met" in smoke.run("replay", wild, *audit)
    smoke.run("compile", "-o", "validator.py")
    assert "def " in (smoke.work / "validator.py").read_text()

    # serve over stdio, driven by the SDK's client
    params = StdioServerParameters(command=str(bin_ / "regdev"),
                                   args=["serve", "--log-level", "warning", *audit],
                                   env={"HOME": smoke.env["HOME"], "PATH": smoke.env["PATH"]},
                                   cwd=str(smoke.work))
    assert sys.__stderr__ is not None
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(
            Client(stdio_client(params, errlog=sys.__stderr__), read_timeout_seconds=60)
    ) as client:
        listed_tools = portal.call(client.list_tools)
        assert [tool.name for tool in listed_tools.tools] == ["write_register", "read_register"]
        result = portal.call(client.call_tool, "write_register", {"addr": 3, "data": 255})
        assert result.is_error is False
        assert result.structured_content == {"ok": True, "tool": "write_register",
                                             "result": {"addr": 3, "data": 255}}

    # eval on its default suite and map (the installed examples), against a recorded model
    with ProviderServer(responder(sloppy=False)) as server:
        out = smoke.run("eval", "--model", "clean", "--base-url", server.openai_url,
                        "--max-retries", "0", "-k", "1", "--json", "--quiet", *audit)
    assert json.loads(out)["summary"]["tasks_passed_every_trial"] == 21

    records = smoke.run("audit", "--db", str(smoke.audit), "--json")
    assert '"write_register"' in records
    assert "1st-try valid" in smoke.run("report", "--db", str(smoke.audit))
    assert "every contender agreed with regdev's verdict on every case" in smoke.run(
        "bench", "--quick")

    if missing("avr") is None:  # the Uno image, built into the cache, not into site-packages
        avr = smoke.popen("firmware-sim", "--avr")
        try:
            assert avr.stdout is not None
            assert avr.stdout.readline().startswith("/dev/"), avr.stderr
        finally:
            avr.terminate()
            avr.communicate(timeout=COMMAND_TIMEOUT)
        assert list(smoke.cache.glob("regdev/firmware-*/avr/regdev-uno.elf"))
        assert not (package / "_firmware" / "c" / "build").exists()


@pytest.mark.install
@pytest.mark.timeout(1200)
def test_what_users_install_runs(dist: dict[str, Path], tmp_path: Path) -> None:
    """The wheel installed into a fresh environment outside the tree runs every command's
    smoke path from an empty folder (the firmware from the package, the examples found
    installed); then the sdist installed over it, as pip builds it for a user without the
    wheel, runs the data files' smoke path, and its own tests run from the unpacked sdist.
    (The sdist shares the environment's dependencies: they are the wheel's, and installing
    them twice would double the test's time; regdev itself is reinstalled from the sdist.)"""
    pip = [sys.executable, "-m", "pip", "--python", str(tmp_path / "venv" / "bin" / "python"),
           "install", "--quiet", "--no-compile", "--disable-pip-version-check"]
    with fresh_venv(tmp_path / "venv", "--no-compile", f"{dist['wheel']}[{EXTRAS}]") as bin_:
        smoke_every_command(bin_, tmp_path / "wheel")
        for install in (["--force-reinstall", "--no-deps", str(dist["sdist"])],
                        ["pytest", "pytest-timeout", "hypothesis"]):
            done = subprocess.run([*pip, *install], capture_output=True, text=True,
                                  timeout=600, check=False)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        where = tmp_path / "sdist"
        where.mkdir()
        smoke_data_files(Smoke(bin_, where))
        unpacked = tmp_path / "unpacked"
        with tarfile.open(dist["sdist"]) as tar:
            tar.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()
        # (test_parse's property test of repeated keys, 300 examples and most of the file's
        # time, is left out: the suite runs it; here the sdist's tests need only to run)
        done = subprocess.run(
            [str(bin_ / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/test_parse.py", "tests/test_schema_suite.py", "-k",
             "not a_key_repeated_anywhere"],
            cwd=top, capture_output=True, text=True, timeout=600, check=False,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert done.returncode == 0, done.stdout[-3000:]
        assert " passed" in done.stdout.splitlines()[-1]
