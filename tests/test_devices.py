"""The GPU code path, tested without a GPU: a generation on a GPU device never opens tinygrad's CPU device (whose
queue programs compile with clang, which a GPU machine may lack), a run on OpenCL (pocl) needs no C compiler,
and what a device cannot do is refused in one sentence before any model loads."""
import os, subprocess, sys
import numpy as np
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

SAME = """
import sys, numpy as np
from engine import compiled
from sampling import Sampling
from speculative import ModelDraft, speculative_sample
from weights import load_model
out = {}
for folder in sys.argv[2:]:
  target, draft = load_model(folder + "/target"), ModelDraft(load_model(folder + "/draft"))
  ids = np.random.default_rng(0).integers(0, target.config.vocab_size, 24).tolist()
  for rows in (1, 5, 8, 17):  # a token, K + 1 at K = 4 and 16, and the prefill's rows (compiled.PREFILL_ROWS)
    out[f"{folder} logits, {rows} rows"] = compiled.logits(target, ids, 0, rows=rows)
  tokens, _, _ = speculative_sample(target, draft, ids[:3], 12, K=4, sampling=Sampling(0.0), seed=0, eos=None)
  out[f"{folder} greedy tokens"] = np.array(tokens)
np.savez(sys.argv[1], **out)
"""

@pytest.mark.slow
@needs_opencl
def test_the_gpu_layout_computes_what_the_cpu_computes(tmp_path):
  """On OpenCL (pocl: workgroups, so layout.py's GPU kernels: each product one kernel whose sum a workgroup
  shares) the logits match tinygrad's CPU device within float32 rounding at 1, 5, 8 and 17 rows, for a width
  that is a multiple of 32 (128, 4 heads) and one that is not (48, 3 heads, GPT-2's vocabulary); and greedy
  speculative sampling emits the same tokens."""
  folders = []
  for n_layer, n_head, n_embd, vocab_size in ((2, 4, 128, 512), (1, 3, 48, 50257)):
    folder = tmp_path / f"{n_embd}"
    for name, seed in (("target", 1), ("draft", 2)):
      write_checkpoint(folder / name, n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab_size,
                       n_ctx=64, seed=seed)
    folders.append(str(folder))
  results = {}
  for device in ("CPU", "CL"):
    out = subprocess.run([sys.executable, "-c", SAME, str(tmp_path / f"{device}.npz"), *folders],
                         capture_output=True, text=True, cwd=REPO, timeout=900,
                         env={**os.environ, "DEV": device, "BEAM": "0", "CACHEDB": str(tmp_path / f"{device}.db")})
    assert out.returncode == 0, out.stderr
    results[device] = dict(np.load(tmp_path / f"{device}.npz"))
  for key, on_cpu in results["CPU"].items():
    on_cl = results["CL"][key]
    if "greedy" in key:
      assert (on_cl == on_cpu).all(), (key, on_cl, on_cpu)
    else:
      assert np.abs(on_cl - on_cpu).max() <= 1e-5 * max(1.0, np.abs(on_cpu).max()), key
