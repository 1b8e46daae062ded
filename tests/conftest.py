"""The suite runs tinygrad's default kernels: searching the fastest ones (gpt2.SEARCH) takes minutes per call
shape, which would cost CI more than its tests. test_gpt2.py's test_searched_kernels covers the search."""
import os

os.environ["BEAM"] = "0"  # read by gpt2.py on import, and inherited by the CLI runs that tests start
