"""The suite runs tinygrad's default kernels: searching the fastest ones (compiled.SEARCH) takes minutes per call
shape, which would cost CI more than its tests. test_gpt2.py's test_search_is_never_in_a_call_and_gives_the_same_logits
covers the search.

It runs on the device the command line would pick: with DEV unset, where tinygrad picks an OpenCL driver that runs
on this machine's CPU (pocl), tinygrad's CPU device instead (session.host_cpu_instead, the command line's rule),
for this process and the command lines it starts. DEV=CL keeps OpenCL."""
import os

os.environ["BEAM"] = "0"  # read by compiled.py (and tinygrad) on import, and inherited by the CLI runs that tests start

from tinygrad.helpers import DEV  # noqa: E402  (after BEAM is set)
from session import host_cpu_instead  # noqa: E402

if host_cpu_instead():
  DEV.value = os.environ["DEV"] = "CPU"

def pytest_report_header() -> str:
  """The device every test ran on, at the top of the log (CI runs the suite on CPU and on CL)."""
  from tinygrad import Device
  return f"tinygrad device: {Device.DEFAULT} (DEV={os.environ.get('DEV', 'unset')})"
