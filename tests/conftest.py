"""The suite runs tinygrad's default kernels: searching the fastest ones (compiled.SEARCH) takes minutes per call
shape, which would cost CI more than its tests. test_gpt2.py's test_search_is_never_in_a_call_and_gives_the_same_logits
covers the search."""
import os

os.environ["BEAM"] = "0"  # read by compiled.py (and tinygrad) on import, and inherited by the CLI runs that tests start

def pytest_report_header() -> str:
  """The device every test ran on, at the top of the log (CI runs the suite on CPU and on CL)."""
  from tinygrad import Device
  return f"tinygrad device: {Device.DEFAULT} (DEV={os.environ.get('DEV', 'unset')})"
