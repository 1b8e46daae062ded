"""The GPU code path, tested without a GPU: a generation on a GPU device never opens tinygrad's CPU device (whose
queue programs compile with clang, which a GPU machine may lack), a run on OpenCL (pocl) needs no C compiler,
and what a device cannot do is refused in one sentence before any model loads."""
import os, subprocess, sys
import pytest
from tiny import REPO, TOKENIZER_DIR, run_script, write_checkpoint

def python(code: str, env: dict) -> subprocess.CompletedProcess:
  """Run code in a fresh Python in the repo: a device is chosen once per process, at tinygrad's import."""
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                        env={**os.environ, **env}, timeout=600)

def has_opencl() -> bool:
  return python("from tinygrad import Device; Device['CL']", {}).returncode == 0

needs_opencl = pytest.mark.skipif(not has_opencl(), reason="no OpenCL device: apt-get install pocl-opencl-icd")

GENERATE = """
from tinygrad import Device
from weights import load_model
from speculative import ModelDraft, autoregressive_sample, speculative_sample
target, draft = load_model({target!r}), ModelDraft(load_model({draft!r}))
speculative_sample(target, draft, [1, 2, 3], 9, K=3, seed=0)
autoregressive_sample(target, [1, 2, 3], 5, rows=4, seed=0)
print(Device.DEFAULT, sorted(Device._opened_devices))
"""

@pytest.mark.slow
def test_a_generation_on_a_gpu_device_never_opens_the_cpu_device(tmp_path):
  """DEV=NULL stands in for a GPU: it runs no kernel, and NULL_ALLOW_COPYOUT lets results be read (as zeros).
  Loading, both algorithms and every read of a result must leave tinygrad's CPU device closed."""
  shape = dict(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_ctx=32)
  target = write_checkpoint(tmp_path / "target", seed=1, **shape)
  draft = write_checkpoint(tmp_path / "draft", seed=2, **shape)
  out = python(GENERATE.format(target=str(target), draft=str(draft)),
               {"DEV": "NULL", "NULL_ALLOW_COPYOUT": "1", "CACHEDB": str(tmp_path / "cache.db")})
  assert out.returncode == 0, out.stderr
  device, opened = out.stdout.strip().splitlines()[-1].split(" ", 1)
  assert device == "NULL" and "'CPU'" not in opened, out.stdout

@pytest.mark.slow
@needs_opencl
def test_a_run_on_opencl_needs_no_c_compiler(tmp_path):
  """The issue's command: with CC=/bin/false, any clang call fails; on DEV=CL the run must not make one."""
  out = run_script("speculative.py", "--random", "--target", "2,2,64", "--draft", "1,2,64", "--max-new-tokens",
                   "4", "--prompt", "Hello", "--tokenizer", str(TOKENIZER_DIR),
                   env={"DEV": "CL", "CC": "/bin/false", "BEAM": "0", "CACHEDB": str(tmp_path / "cache.db")})
  assert out.returncode == 0, out.stderr
  assert "--- Algorithm 2 (speculative)" in out.stdout and "device CL" in out.stdout

def refused(args: list[str], env: dict) -> str:
  """Run the CLI, which must refuse: exit 2, one line on stderr, no traceback. Returns that line. The target is
  gpt2 and downloads are refused (port 9), so a check made after loading would say 'Could not download'."""
  out = run_script("speculative.py", "--prompt", "Hi", "--target", "gpt2", "--draft", "gpt2", *args,
                   env={"HF_ENDPOINT": "http://127.0.0.1:9", **env})
  assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
  assert len(out.stderr.strip().splitlines()) == 1, out.stderr
  return out.stderr

@needs_opencl
def test_half_on_a_device_without_float16_is_refused_before_loading(tmp_path):
  message = refused(["--half"], {"DEV": "CL", "XDG_CACHE_HOME": str(tmp_path)})
  assert "cannot compute in float16: drop --half" in message

def nvrtc_found() -> bool:
  return python("from tinygrad.runtime.support.c import DLL; from tinygrad.runtime.autogen import nvrtc; "
                "assert 'nvrtc' in DLL._loaded_", {"NVRTC_PATH": ""}).returncode == 0

@pytest.mark.skipif(nvrtc_found(), reason="NVRTC is installed where tinygrad finds it without NVRTC_PATH")
def test_cuda_without_nvrtc_is_refused_before_loading(tmp_path):
  """DEV=NULL:CUDA:sm_90 compiles for an H100 with NVRTC; where tinygrad cannot find it, one sentence names
  NVRTC_PATH."""
  message = refused(["--half"], {"DEV": "NULL:CUDA:sm_90", "NVRTC_PATH": "", "XDG_CACHE_HOME": str(tmp_path)})
  assert "NVRTC" in message and "NVRTC_PATH" in message
