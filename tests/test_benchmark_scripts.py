"""The scripts in benchmarks/ as a user meets them: ``--help`` in a venv with only regdev's
runtime, one line for a missing optional package, the pytest-benchmark suites run directly,
and every count option bounded (never a time: nothing here is measured).

"Only the runtime" is made, not assumed: each script runs in a fresh interpreter whose
``sitecustomize`` hides every installed module that regdev's own requirements (without
extras) do not bring, so ``import pytest`` or ``import pymodbus`` fails there as in the venv
``scripts/demo`` makes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

FOLDER = ROOT / "benchmarks"
SCRIPTS = sorted(path.name for path in FOLDER.glob("*.py"))
SUITES = [name for name in SCRIPTS if name.startswith("bench_")]
#: What any venv has, extras or not.
TOOLS = {"pip", "setuptools", "_distutils_hack", "pkg_resources"}


def _runtime() -> set[str]:
    """The distributions regdev's requirements bring, without any extra (names canonical)."""
    seen: set[str] = set()
    todo = ["regdev"]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def _hidden() -> list[str]:
    """Every installed top-level module that only something outside the runtime provides."""
    runtime = _runtime()
    return sorted(module for module, dists in metadata.packages_distributions().items()
                  if module not in TOOLS
                  and all(canonicalize_name(dist) not in runtime for dist in dists))


SITECUSTOMIZE = '''import sys

HIDDEN = frozenset({hidden!r})


class Hide:
    """Not installed, as far as this interpreter can tell."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Hide())
'''


@pytest.fixture(scope="module")
def runtime_only(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of an interpreter that sees only regdev's runtime (checked: pytest,
    pymodbus and mcp fail to import there, msgspec and pydantic do not)."""
    folder = tmp_path_factory.mktemp("runtime-only")
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(hidden=_hidden()))
    env = {**os.environ, "PYTHONPATH": str(folder)}
    probe = ("import importlib.util as u\n"
             "for name in ('pytest', 'pytest_benchmark', 'pymodbus', 'mcp', 'jsonschema'):\n"
             "    try:\n        __import__(name)\n    except ModuleNotFoundError:\n"
             "        continue\n    raise SystemExit(name + ' is importable')\n"
             "import msgspec, pydantic, serial, regdev.bench._bench\n")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return env


def _run(script: str, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FOLDER / script), *args], cwd=FOLDER, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


#: The runs made in the runtime-only interpreter: every script's --help, each suite run
#: directly, and the scripts that need an extra run without it.
RUNS = [*((name, "--help") for name in SCRIPTS), *((name,) for name in SUITES),
        ("modbus_ratio.py",), ("http_load.py",), ("mcp_sdk_compare.py",)]


#: Runs scripts as ``python SCRIPT ARGS...`` would, each in a child forked from one
#: interpreter that has imported regdev once (half a second a script otherwise), so that no
#: run sees another's modules. argv[1]: the runs as JSON; prints one JSON list of
#: [status, stdout, stderr].
FORKED = """
import json, os, runpy, sys, tempfile, traceback
import regdev.bench._bench  # what every script imports first; each child starts from here

results = []
for run in json.loads(sys.argv[1]):
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    child = os.fork()
    if child == 0:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv, sys.path[0] = run, os.getcwd()
        try:
            runpy.run_path(run[0], run_name="__main__")
            status = 0
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
            if isinstance(stop.code, str):
                print(stop.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    texts = []
    for stream in (out, err):
        stream.seek(0)
        texts.append(stream.read().decode())
    results.append([status, *texts])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def runs(runtime_only: dict[str, str]) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """:data:`RUNS` in the runtime-only interpreter (forked from one, see :data:`FORKED`)."""
    done = subprocess.run([sys.executable, "-c", FORKED, json.dumps(RUNS)], cwd=FOLDER,
                          env=runtime_only, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return {run: subprocess.CompletedProcess(list(run), status, out, err)
            for run, (status, out, err) in zip(RUNS, json.loads(done.stdout), strict=True)}


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_works_with_only_the_runtime(
        script: str, runs: dict[tuple[str, ...], subprocess.CompletedProcess[str]]) -> None:
    """``python benchmarks/SCRIPT --help`` with no extra installed: a usage line on stdout,
    nothing on stderr (no traceback), exit 0; the suites' usage is the command that runs
    them, the helper modules' what they are."""
    done = runs[script, "--help"]
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    first = done.stdout.splitlines()[0]
    if script in SUITES:
        assert first == f"usage: scripts/test benchmarks/{script} [PYTEST OPTIONS]"
    elif script.startswith("_"):
        assert first == (f"usage: {script} is imported by the scripts in benchmarks/, not run "
                         "(benchmarks/README.md lists the scripts)")
    else:
        assert first.startswith(f"usage: {script} [-h]"), first


@pytest.mark.parametrize(("script", "line"), [
    ("modbus_ratio.py", "modbus_ratio.py: needs pymodbus (the modbus extra): .venv/bin/pip "
                        "install -e '.[modbus]' (scripts/test installs it too)"),
    ("http_load.py", "http_load.py: needs mcp (the mcp extra): scripts/serve installs it into "
                     ".venv (or: .venv/bin/pip install -e '.[mcp]'; scripts/test installs it "
                     "too)"),
    ("mcp_sdk_compare.py", "mcp_sdk_compare.py: needs mcp (the mcp extra): scripts/serve "
                           "installs it into .venv (or: .venv/bin/pip install -e '.[mcp]'; "
                           "scripts/test installs it too)"),
])
def test_a_missing_package_is_one_line_saying_how_to_get_it(
        script: str, line: str,
        runs: dict[tuple[str, ...], subprocess.CompletedProcess[str]]) -> None:
    """Run (not --help) without the extra it needs: one line naming the package and the
    project's command that installs it, exit 2, nothing on stdout."""
    done = runs[(script,)]
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")


@pytest.mark.parametrize("script", SUITES)
def test_a_suite_run_directly_says_how_to_run_it(
        script: str, runs: dict[tuple[str, ...], subprocess.CompletedProcess[str]]) -> None:
    """A pytest-benchmark suite run as a script says in one line how to run it and exits 2
    (before it imports pytest: the same with pytest installed); its --help says what the
    command needs; the README's table gives that command."""
    line = (f"{script}: a pytest-benchmark suite, not a script: run it with scripts/test "
            f"benchmarks/{script} (--help: more)\n")
    done = runs[(script,)]
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line)
    text = " ".join(runs[script, "--help"].stdout.split())
    assert ("It needs pytest and pytest-benchmark (the dev extra): scripts/test installs them "
            "into .venv and runs pytest with the arguments given.") in text
    readme = (FOLDER / "README.md").read_text(encoding="utf-8")
    assert f"| `scripts/test benchmarks/{script}" in readme
    assert f"python -m pytest benchmarks/{script}" not in readme


WHOLE = "must be a whole number in"
#: (script, OPTION=VALUE, what the one line says after "argument OPTION: ").
OUT_OF_RANGE = [
    ("gate_pipeline.py", "--rounds=99999999999999999999",
     f"{WHOLE} 1..1000, got '99999999999999999999'"),
    ("gate_pipeline.py", "--rounds=0", f"{WHOLE} 1..1000, got '0'"),
    ("raw_verdict.py", "--rounds=1001", f"{WHOLE} 1..1000, got '1001'"),
    ("missing_field.py", "--rounds=x", f"{WHOLE} 1..1000, got 'x'"),
    ("gate_pipeline.py", "--batch-ms=nan", "must be a number in 0.01..100, got 'nan'"),
    ("gate_pipeline.py", "--batch-ms=inf", "must be a number in 0.01..100, got 'inf'"),
    ("audit_write.py", "--batch-ms=0", "must be a number in 0.01..100, got '0'"),
    ("block_write.py", "--rounds=1e30", f"{WHOLE} 1..1000, got '1e30'"),
    ("block_write.py", "--batch-ms=100000", "must be a number in 0.01..100, got '100000'"),
    ("audit_throughput.py", "--calls=99999999999", f"{WHOLE} 1..100000, got '99999999999'"),
    ("audit_throughput.py", "--rounds=0", f"{WHOLE} 1..1000, got '0'"),
    ("audit_breakdown.py", "--rounds=1001", f"{WHOLE} 1..1000, got '1001'"),
    ("audit_breakdown.py", "--calls=0", f"{WHOLE} 1..100000, got '0'"),
    ("firmware_roundtrip.py", "--calls=1", f"{WHOLE} 2..100000, got '1'"),
    ("bridge_roundtrip.py", "--calls=0", f"{WHOLE} 2..100000, got '0'"),
    ("gate_hotpath.py", "--calls=-5", f"{WHOLE} 1..10000000, got '-5'"),
    ("load.py", "--threads=100000", f"{WHOLE} 1..1024, got '100000'"),
    ("load.py", "--calls=0", f"{WHOLE} 1..100000, got '0'"),
    ("http_load.py", "--clients=0", f"{WHOLE} 1..256, got '0'"),
    ("http_load.py", "--calls=100001", f"{WHOLE} 1..100000, got '100001'"),
    ("mcp_sdk_compare.py", "--clients=1,0", "must be whole numbers in 1..256, comma-separated, "
                                            "got '1,0'"),
    ("mcp_sdk_compare.py", "--seconds=0", f"{WHOLE} 1..600, got '0'"),
    ("mcp_sdk_compare.py", "--rounds=100", f"{WHOLE} 1..99, got '100'"),
    ("modbus_ratio.py", "--batches=99999999999999999999",
     f"{WHOLE} 1..1000, got '99999999999999999999'"),
    ("modbus_ratio.py", "--batch=0", f"{WHOLE} 1..100000, got '0'"),
]


def _main(script: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> int | str | None:
    """Run ``script``'s main() in this process with ``args`` (its imports are already here:
    milliseconds, where a new interpreter takes half a second); its exit status."""
    monkeypatch.syspath_prepend(str(FOLDER))
    monkeypatch.setattr(sys, "argv", [script, *args])
    spec = importlib.util.spec_from_file_location(f"benchmarks_{script[:-3]}", FOLDER / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # msgspec resolves its types there
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as stop:
        module.main()
    return stop.value.code


@pytest.mark.parametrize(("script", "argument", "says"), OUT_OF_RANGE)
def test_a_count_out_of_range_is_refused_in_one_line(
        script: str, argument: str, says: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A count outside its range (too large to finish, zero, negative, not a number, nan):
    refused before anything runs, one line on stderr, exit 2."""
    assert _main(script, monkeypatch, argument) == 2
    option = argument.partition("=")[0]
    assert capsys.readouterr() == ("", f"{script}: error: argument {option}: {says} (--help "
                                       "for the usage)\n")


def test_a_huge_rounds_is_refused_by_the_script_itself() -> None:
    """The trial's case end to end, in a new interpreter: refused at once, one line."""
    done = _run("gate_pipeline.py", "--rounds", "99999999999999999999")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("gate_pipeline.py: error: argument --rounds: must be a whole number "
                           "in 1..1000, got '99999999999999999999' (--help for the usage)\n")


def _script_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_script", FOLDER / "_script.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ranges_take_their_ends() -> None:
    """The ends of a range are taken, one past them refused (the parser's own types)."""
    script = _script_module()
    rounds, batch = script.count(1, script.MAX_ROUNDS), script.span(*script.BATCH_MS)
    assert (rounds("1"), rounds("1000"), batch("0.01"), batch("100")) == (1, 1000, 0.01, 100.0)
    for parse, text in ((rounds, "1001"), (rounds, "0"), (rounds, "2.5"), (batch, "0.009"),
                        (batch, "100.1"), (batch, "-inf")):
        with pytest.raises(Exception, match=r"must be a (whole )?number in"):
            parse(text)


def test_help_names_each_range(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    """--help states each bounded option's range (the compare scripts' from one place)."""
    assert _main("gate_pipeline.py", monkeypatch, "--help") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "the median shown: 1..1000 (default 25;" in text
    assert "the length of one batch, in ms: 0.01..100 (default 5)" in text
    assert _main("load.py", monkeypatch, "--help") == 0
    assert "concurrent callers: 1..1024 (default 32)" in " ".join(
        capsys.readouterr().out.split())
    assert _main("processes_reliability.py", monkeypatch, "--help") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("client threads: 1..64 (default 16)" in text
            and "keyed writes per client: 1..100000 (default 500)" in text)
    # the whole first paragraph of its docstring, not its first line cut mid-sentence
    assert "--fleet` processes on one PostgreSQL store behind nginx" in text
    assert "apt-get install postgresql nginx" in text and "Exit status 1" in text
