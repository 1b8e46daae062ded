"""The suite runs tinygrad's default kernels: searching the fastest ones (gpt2.SEARCH) takes minutes per call
shape, which would cost CI more than its tests. test_gpt2.py's test_searched_kernels covers the search."""
import os

os.environ["BEAM"] = "0"  # read by gpt2.py on import, and inherited by the CLI runs that tests start

def pytest_report_header() -> str:
  """The device every test ran on, at the top of the log (CI runs the suite on CPU and on CL)."""
  from tinygrad import Device
  return f"tinygrad device: {Device.DEFAULT} (DEV={os.environ.get('DEV', 'unset')})"
