"""The suite runs tinygrad's default kernels: searching the fastest ones (engine/compiled.py) takes minutes per call
shape, which would cost CI more than its tests. test_gpt2.py's test_search_is_never_in_a_call_and_gives_the_same_logits
covers the search.

It runs on the device the command line would pick: with DEV unset, where tinygrad picks an OpenCL driver that runs
on this machine's CPU (pocl), tinygrad's CPU device instead (tools/session.py's host_cpu_instead, the command line's rule),
for this process and the command lines it starts. DEV=CL keeps OpenCL.

`python -m pytest` spreads the tests over every core where pytest-xdist is installed (requirements-dev.txt):
pytest_cmdline_main below. Without it the same command runs them in one process, one core."""
import os, re
import pytest

os.environ["BEAM"] = "0"  # read by engine/compiled.py (and tinygrad) on import, and inherited by the CLI runs that tests start
# Each process compiles its kernels itself, not through tinygrad's pool of compiling processes: the suite already
# runs a worker a core (below), and the pool, one more process a worker, restarts every 16 kernels, importing
# tinygrad again (tests/test_distribution.py on this project's 2 cores: 146 s with the pool, 127 s without).
os.environ["PARALLEL"] = "0"

from tinygrad.helpers import DEV  # noqa: E402  (after BEAM is set)
from tools.session import host_cpu_instead  # noqa: E402

if host_cpu_instead():
  DEV.value = os.environ["DEV"] = "CPU"

@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns -n auto into a number of workers
def pytest_cmdline_main(config: pytest.Config) -> None:
  """-n auto --dist worksteal unless -n was given: a worker a core (-n 0: one process), each starting on a
  contiguous share of the tests, so that a test file mostly stays on one worker and a module's fixtures (Theorem
  1's models, their compiled rounds) are built there once, not on every worker; an idle worker takes half of
  another's queue. Not with -s, whose prints a worker would keep, nor with --pdb, nor in a worker itself, nor for
  the real tier (-m real), whose 7 GB of models every worker would load again."""
  option = config.option
  real = re.search(r"(?<!not )\breal\b", getattr(option, "markexpr", "") or "")
  if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput") and not real
      and option.numprocesses is None and option.capture != "no" and not option.usepdb):
    option.numprocesses, option.dist = "auto", "worksteal" if option.dist == "no" else option.dist

def pytest_report_header() -> str:
  """The device every test ran on, at the top of the log (CI runs the suite on CPU and on CL)."""
  from tinygrad import Device
  return f"tinygrad device: {Device.DEFAULT} (DEV={os.environ.get('DEV', 'unset')})"

def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
  """The figures that tests record with record_property("figure", ...) (the real tier's memory), after the results:
  recorded on a report, they reach this process from pytest-xdist's workers too."""
  figures = dict.fromkeys(value for reports in terminalreporter.stats.values() for report in reports
                          for name, value in getattr(report, "user_properties", []) if name == "figure")
  if figures:
    terminalreporter.section("figures")
    for line in figures:
      terminalreporter.write_line(line)
