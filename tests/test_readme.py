"""What the README gives a reader to run, run as the reader would: its Python example, pasted into a fresh Python
in the repository's folder, on the demo pair; and its test command, which spreads the tests over every core where
pytest-xdist is installed and runs them in one process where it is not."""
from __future__ import annotations
import os, re, subprocess, sys, types
import pytest
from tiny import REPO

def python_blocks() -> list[str]:
  """The README's fenced Python blocks, as a reader copies them."""
  MarkdownIt = pytest.importorskip("markdown_it", reason="pip install -r requirements-dev.txt").MarkdownIt
  tokens = MarkdownIt("commonmark").parse((REPO / "README.md").read_text(encoding="utf-8"))
  return [t.content for t in tokens if t.type == "fence" and t.info.strip() == "python"]

@pytest.mark.slow  # it compiles the demo pair's rounds, Algorithm 1's step and a lookup round: a minute or two
def test_the_readmes_python_example_runs_on_the_demo_pair():
  """It loads the pair and the tokenizer, samples with each draft and decodes: it must run as pasted, and print
  the decoded text and the run's α̂ and tokens a round, within their bounds at K = 4."""
  blocks = python_blocks()
  assert len(blocks) == 1, "the README should hold its one Python example"
  env = {**os.environ, "DEV": os.environ.get("DEV", "CPU")}
  run = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  text, figures = run.stdout.rstrip("\n").rsplit("\n", 1)
  assert text.strip(), "no decoded text"
  alpha, per_round = map(float, re.fullmatch(r"α̂ (\S+), (\S+) tokens a round", figures).groups())
  assert 0 <= alpha <= 1 and 1 <= per_round <= 5

def pytest_run(*args: str) -> str:
  """The README's test command on test_docs.py's slug rules (a fraction of a second of tests), in a fresh
  process, as a reader runs it (no PYTEST_ADDOPTS, not inside a worker): what it prints."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST") and not k.startswith("PYTEST_XDIST_WORKER")
         and k != "PYTEST_XDIST_TESTRUNUID"}
  run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/test_docs.py",
                        "-k", "slug_follows_github", *args], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=300)
  assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
  return run.stdout

@pytest.mark.slow  # four pytest runs in fresh processes, each importing tinygrad: seconds each
def test_the_test_command_runs_on_every_core_and_without_xdist():
  """With pytest-xdist installed, `python -m pytest` starts a worker a core (-n auto: xdist's own count); -n 0,
  -s and a run without the plugin stay in one process. All pass."""
  pytest.importorskip("xdist", reason="pip install -r requirements-dev.txt")
  from xdist.plugin import pytest_xdist_auto_num_workers
  # the count that -n auto takes: PYTEST_XDIST_AUTO_NUM_WORKERS, else the cores
  cores = pytest_xdist_auto_num_workers(types.SimpleNamespace(option=types.SimpleNamespace(numprocesses="auto")))
  assert re.search(rf"created: {cores}/{cores} workers", pytest_run())
  for alone in (["-n", "0"], ["-s"], ["-p", "no:xdist"]):
    out = pytest_run(*alone)
    assert "workers" not in out and re.search(r"8 passed", out), alone

@pytest.mark.parametrize("given, spread", [
  pytest.param(dict(), True, id="the README's command"),
  pytest.param(dict(numprocesses=0), False, id="-n 0"),
  pytest.param(dict(numprocesses=3), False, id="-n 3, as given"),
  pytest.param(dict(capture="no"), False, id="-s, whose prints would stay in the workers"),
  pytest.param(dict(usepdb=True), False, id="--pdb"),
  pytest.param(dict(dist="loadscope"), True, id="--dist as given, on every core"),
  pytest.param(dict(xdist=False), False, id="no pytest-xdist, or -p no:xdist"),
  pytest.param(dict(worker=True), False, id="inside a worker"),
  pytest.param(dict(markexpr="real"), False, id="-m real, whose models each worker would load"),
  pytest.param(dict(markexpr="not slow and not real"), True, id="pytest.ini's own -m"),
])
def test_the_rule_that_spreads_the_tests(given: dict, spread: bool):
  """conftest.pytest_cmdline_main sets -n auto (and --dist worksteal unless --dist was given) only where nothing
  says otherwise."""
  import conftest
  option = types.SimpleNamespace(numprocesses=given.get("numprocesses"), dist=given.get("dist", "no"),
                                 capture=given.get("capture", "fd"), usepdb=given.get("usepdb", False),
                                 markexpr=given.get("markexpr", ""))
  config = types.SimpleNamespace(option=option, pluginmanager=types.SimpleNamespace(
    hasplugin=lambda name: given.get("xdist", True) and name == "xdist"))
  if given.get("worker"):
    config.workerinput = {}
  before = dict(vars(option))
  conftest.pytest_cmdline_main(config)
  if spread:
    assert option.numprocesses == "auto" and option.dist == given.get("dist", "worksteal")
  else:
    assert vars(option) == before
