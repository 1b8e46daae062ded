"""The decode step's kernels and bytes: on tinygrad's CPU device (counted on DEV=NULL, which runs no kernel and
lays kernels out as the CPU device does), on a GPU (compiled for an H100 by NVRTC, DEV=NULL:CUDA:sm_90) and
within Metal's limits (rendered for Metal, DEV=NULL:METAL), each without JIT graphs. A decode step is bound by
its number of kernels as much as by its bytes, so these hold what layout.py shapes gpt2.py for."""
import json, os, subprocess, sys
import pytest
from tiny import REPO

pytestmark = pytest.mark.slow  # the slow tier: python -m pytest -m slow

# One block's 10 kernels: ln_1's statistics; q, k, v (ln_1's normalisation inside its load); the KV write; the
# scores; their max; the product of exp(scores - max) with v, its sum beside it; c_proj; ln_2's statistics;
# c_fc; and c_proj (gelu inside its load). Around the 12 blocks, 10: the token id, the embeddings (2), ln_f's
# statistics, the LM head and the Sampling head's softmax (5). Five rows (run as 6, compiled.padded_rows) add 7: four
# token ids, their concatenation and the causal mask (2).
ONE_ROW_KERNELS = 12 * 10 + 10
FIVE_ROW_KERNELS = ONE_ROW_KERNELS + 7
MAX_BYTES = 1.05  # bytes the kernels touch ÷ the weights' bytes: each weight read once, little else

COUNT = """
from engine import layout
from tools.bench import step_cost
from sampling import Sampling
from weights import random_model
if {unpacked}:  # the control: each layer norm's weight and bias left in two buffers
  layout.LayerNorm.pack = lambda self: None
model = random_model("gpt2")
for rows in (1, 5):
  print(*step_cost(model, rows, Sampling()))
"""

def count(tmp_path, unpacked: bool) -> list[tuple[int, float]]:
  """(kernels, bytes ÷ weights) of the one-row and the five-row step, counted in a fresh DEV=NULL process."""
  env = {**os.environ, "DEV": "NULL", "NULL_ALLOW_COPYOUT": "1", "CACHEDB": str(tmp_path / "cache.db")}
  out = subprocess.run([sys.executable, "-c", COUNT.format(unpacked=unpacked)], capture_output=True, text=True,
                       cwd=REPO, env=env, timeout=600)
  assert out.returncode == 0, out.stderr
  return [(int(k), float(ratio)) for k, ratio in (line.split() for line in out.stdout.strip().splitlines()[-2:])]

def test_decode_step_kernels_and_bytes(tmp_path):
  (one_row, one_bytes), (five_rows, five_bytes) = count(tmp_path, unpacked=False)
  assert one_row <= ONE_ROW_KERNELS and five_rows <= FIVE_ROW_KERNELS, (one_row, five_rows)
  assert one_bytes <= MAX_BYTES and five_bytes <= MAX_BYTES, (one_bytes, five_bytes)

def test_the_count_sees_a_layer_norm_in_three_kernels(tmp_path):
  """Negative control: with weight and bias in two buffers, tinygrad writes each normalised x out (a kernel per
  layer norm, 25 in all), and the same limits must fail."""
  (one_row, _), (five_rows, _) = count(tmp_path, unpacked=True)
  assert one_row == ONE_ROW_KERNELS + 25 and five_rows > FIVE_ROW_KERNELS, (one_row, five_rows)

# A round's parts, by kernel names. The kernels a round launches (counted as tinygrad's DEBUG=2 names them, with
# every symbolic size, start_pos or start+j+t, read as "(n)") must hold the target's step of K+1 rows and the
# draft's K-1 one-row steps, each as compiled.step compiles it alone: then c and t(K+1)/t(1) are the round's. Not
# counts: a step padded to 8 rows and one of 5 differ by 3 kernels, and by the names of all the others. Left out:
# the kernels named "E" alone, each of which writes one Variable into a one-element buffer (a step's token ids;
# a round's target reads its drafts instead)
NAMES = r"""
import collections, re, sys
import tinygrad.engine.realize as realize
from tinygrad import Context
from tinygrad.uop.ops import Ops
from engine.compiled import Compiled, prepare, step
from sampling import Sampling
from speculative import lookup_round, model_round
from weights import random_model
names = []
track_stats = realize.track_stats
def spy(ctx, call, *args):  # every kernel that a replay launches, by name
  for _, kernel in realize.get_call_kernels(call):
    name = re.sub(r"\x1b\[[0-9;]*m", "", kernel.src[0].arg.name) if kernel.src[0].op is Ops.PROGRAM else "E"
    if name != "E":
      names.append(re.sub(r"\([^)]*\)", "(n)", name))
  return track_stats(ctx, call, *args)
realize.track_stats = spy
def launched(call, searched, *values):  # a fresh copy of the call without JIT graphs: compile, capture, replay
  with Context(JIT=2):
    alone = Compiled(call.name, call.signature, call.beam, lambda _: call.build(searched))
    for _ in range(3):
      names.clear()
      alone(*values)
  return collections.Counter(names)
sampling = Sampling()
target, draft = random_model("2,4,128", seed=0), random_model("1,2,64", seed=1)
prepare(target), prepare(draft)
draft_step = launched(step(draft, 1, sampling), False, 5)
for K in (2, 4, 6):  # 3, 5 and 7 rows: run at 3, 6 and 8 (compiled.padded_rows)
  target_step = launched(step(target, K + 1, sampling), False, 5)
  later_drafts = collections.Counter({kernel: n * (K - 1) for kernel, n in draft_step.items()})
  calls = (("round", model_round(target, draft, K, sampling), (4, 1, 1, 2, K, 0, 0, 5), later_drafts),
           ("lookup", lookup_round(target, K, sampling), (1,) * (K + 1) + (K, 0, 0, 5), collections.Counter()))
  for name, call, values, drafts in calls:
    # at K = 4 also the control: the call built as searched kernels are (5 rows, unpadded), beside default steps
    for layout in ("default", "unpadded") if K == 4 else ("default",):
      missing = target_step + drafts - launched(call, layout == "unpadded", *values)
      print(K, name, layout, sum(missing.values()))
"""

@pytest.fixture(scope="module")
def missing(tmp_path_factory) -> dict[tuple[int, str, str], int]:
  """{(K, call, layout): how many kernels of the call's parts timed alone it did not launch}, from one fresh
  DEV=NULL process (about 3 minutes: it compiles 9 rounds)."""
  cache = tmp_path_factory.mktemp("names") / "cache.db"
  env = {**os.environ, "DEV": "NULL", "NULL_ALLOW_COPYOUT": "1", "CACHEDB": str(cache)}
  out = subprocess.run([sys.executable, "-c", NAMES], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=900)
  assert out.returncode == 0, out.stderr
  return {(int(K), name, layout): int(n) for K, name, layout, n in (l.split() for l in out.stdout.splitlines()[-8:])}

@pytest.mark.parametrize("K", [2, 4, 6])
def test_a_round_launches_the_kernels_of_its_parts_timed_alone(missing, K):
  """With default kernels (BEAM=0), the round and prompt lookup's round launch every kernel of the target's
  K+1-row step and the draft's one-row steps, as compiled.step runs them alone."""
  assert missing[(K, "round", "default")] == 0 and missing[(K, "lookup", "default")] == 0, missing

def test_the_names_tell_an_unpadded_target_pass(missing):
  """Negative control: the same rounds built with 5 rows unpadded (the kernels before the round ran its steps'
  layout), beside steps padded to 6 rows, must miss most of the target step's kernels."""
  assert missing[(4, "round", "unpadded")] >= 20 and missing[(4, "lookup", "unpadded")] >= 20, missing

# ***** on a GPU, with no GPU: the CUDA kernels that tinygrad compiles for an H100 (tests/gpu_layout.py) *****
# gpt2-xl's widths (1600 wide, 25 heads, GPT-2's 50257 tokens) and gpt2's for the draft, one layer each: every
# kernel of a layer is there, and compiling takes seconds. Two processes, on the 2 cores: float16 and float32,
# each at temperature 1 and with top-k and top-p; the first also K = 16 for a target 1024 wide (gpt2-medium's
# width), the second the controls: Algorithm 1's step with the draw walking its CDF in one thread (the draw
# before), and with the products' opts lost on their way to the kernels (tinygrad's own opts instead). And one
# block's kernels at GPT-2's four widths, 1 and 5 rows, float16, two widths in each process.
LAYOUT = r"""
import json, sys
from tinygrad import Tensor, dtypes
import speculative
from engine import layout
from gpu_layout import block, calls, check
from engine.compiled import prepare
from sampling import Sampling
from weights import random_model
half, controls = sys.argv[1] == "half", sys.argv[2] == "controls"
dtype = dtypes.float16 if half else dtypes.float32
def models(target="1,25,1600"):
  target, draft = random_model(target, dtype, seed=0), random_model("1,12,768", dtype, seed=1)
  prepare(target), prepare(draft)
  return target, draft
found = {}
for name, sampling in (("temperature 1", Sampling()), ("top-k 50, top-p 0.9", Sampling(1.0, 50, 0.9))):
  target, draft = models()
  for call in calls(target, draft, 4, sampling):
    found[f"{sys.argv[1]}, {name}: {call[0]}"] = check(*call)[1:]
if not controls:  # gpt2-medium's width, whose position embedding has attention c_proj's size, and 17 rows
  for call in calls(*models("1,16,1024"), 16, Sampling()):
    found[f"{sys.argv[1]}, 1024 wide: {call[0]}"] = check(*call)[1:]
for width, heads in ((1024, 16), (1280, 20)) if controls else ((768, 12), (1600, 25)):
  found[f"block {width}"] = [block(width, heads, rows, dtypes.float16) for rows in (1, 5)]
def walk(weights, bits):  # the draw before: the same Tensor code with its running sums left inside their readers
  contiguous, Tensor.contiguous = Tensor.contiguous, lambda self, *args, **kwargs: self
  try:
    return draw(weights, bits)
  finally:
    Tensor.contiguous = contiguous
if controls:
  draw, speculative.draw = speculative.draw, walk
  found["serial draw"] = check(*calls(*models(), 4, Sampling())[0])[1:]
  speculative.draw, layout.function = draw, lambda f: f  # outside a tinygrad.function, tinygrad drops the opts
  found["opts lost"] = check(*calls(*models(), 4, Sampling())[0])[1:]
print(json.dumps(found))
"""

def nvrtc_path() -> str | None:
  """NVRTC, where tinygrad would load it: NVRTC_PATH, or NVIDIA's pip package (requirements-cuda.txt)."""
  if os.environ.get("NVRTC_PATH"):
    return os.environ["NVRTC_PATH"]
  try:
    import nvidia.cuda_nvrtc
  except ImportError:
    return None
  path = os.path.join(nvidia.cuda_nvrtc.__path__[0], "lib", "libnvrtc.so.12")
  return path if os.path.exists(path) else None

def two_processes(script: str, env: dict, tmp_path_factory, timeout: int = 900) -> dict:
  """The merged JSON of script run in two fresh processes at once, with arguments "half -" and "float
  controls", each with a cache of its own."""
  env = {**os.environ, "NULL_ALLOW_COPYOUT": "1", "BEAM": "0", **env,
         "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
  runs = [subprocess.Popen([sys.executable, "-c", script, dtype, extra], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=REPO,
                           env={**env, "CACHEDB": str(tmp_path_factory.mktemp(dtype) / "cache.db")})
          for dtype, extra in (("half", "-"), ("float", "controls"))]
  found = {}
  for run in runs:
    out, err = run.communicate(timeout=timeout)
    assert run.returncode == 0, err
    found |= json.loads(out.strip().splitlines()[-1])
  return found

@pytest.fixture(scope="module")
def gpu_layout(tmp_path_factory) -> dict:
  """{config and call: its faults; "block W": one block's (kernels, bytes) at 1 and 5 rows}, compiled for an
  H100 in two fresh DEV=NULL:CUDA:sm_90 processes at once."""
  if nvrtc_path() is None:
    pytest.skip("NVRTC is not installed: pip install -r requirements-cuda.txt")
  return two_processes(LAYOUT, {"DEV": "NULL:CUDA:sm_90", "NVRTC_PATH": nvrtc_path()}, tmp_path_factory)

def test_on_a_gpu_no_thread_walks_alone_and_every_weight_streams(gpu_layout):
  """Algorithm 1's step, a round with a model draft and a prompt-lookup round (K = 4), float16 and float32, at
  temperature 1 and with top-k and top-p, and the three at K = 16 for a target 1024 wide: no thread of any kernel
  runs more than 1024 loop trips, every weight matrix of 1 MiB or more is read by at least min(32768, its bytes ÷
  64) threads, neighbouring threads reading neighbouring addresses, once for all rows (at K = 16, once a block
  of layout.ROWS rows: twice), and the embedding's gather reads only the rows it needs."""
  calls = {k: v for k, v in gpu_layout.items() if ":" in k}
  assert len(calls) == 15 and not any(calls.values()), {k: v for k, v in calls.items() if v}

MAX_BLOCK_KERNELS = 10  # see ONE_ROW_KERNELS: the same 10, each product one kernel
MAX_BLOCK_GROWTH = 1.05  # a block's buffers at 5 rows ÷ at 1 row: each weight read once for all rows

@pytest.mark.parametrize("width", [768, 1024, 1280, 1600])
def test_on_a_gpu_a_block_is_ten_kernels_whose_bytes_hardly_grow_with_rows(gpu_layout, width):
  """At each of GPT-2's widths, float16, one block of a target step launches at most 10 kernels at 1 row and at
  5 (K = 4), and the buffers they bind (the KV cache counted whole, alike at 1 and 5 rows) grow by at most 5 %
  from 1 row to 5: no product splits its sum into partial sums written and read back."""
  (one, one_bytes), (five, five_bytes) = gpu_layout[f"block {width}"]
  assert one <= MAX_BLOCK_KERNELS and five <= MAX_BLOCK_KERNELS, (one, five)
  assert five_bytes / one_bytes <= MAX_BLOCK_GROWTH, five_bytes / one_bytes

def test_the_layout_check_catches_a_serial_draw_and_lost_opts(gpu_layout):
  """Negative controls: the draw before (its CDF walked in one thread) must fail the loop-trip bar; and the
  products with their opts lost (were tinygrad to stop taking a CONTIGUOUS's opts inside a tinygrad.function,
  its own opts would lay them out) must fail the thread and address bars, for the four matrices and the LM
  head."""
  assert any("38809 loop trips" in f for f in gpu_layout["serial draw"]), gpu_layout["serial draw"]
  lost = gpu_layout["opts lost"]
  starved = {f.split(": ")[1].split(" read by")[0] for f in lost if "threads, under" in f}
  assert len(starved) == 5 and any("apart" in f for f in lost), lost

# ***** Metal, with no Mac: every kernel rendered for Metal and held to its limits (tests/gpu_layout.py) *****
# Algorithm 1's step, a round and a lookup round, at K = 4 and 16, at temperature 1 and with top-k and top-p,
# for gpt2-xl's widths drafted by gpt2's: float16 in one process, float32 in the other, which also renders the
# controls, three kernels built to break each limit.
METAL = r"""
import json, sys
from gpu_layout import metal_check, stand_in_metal_compiler
stand_in_metal_compiler()
from tinygrad import Device, Tensor, dtypes
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.function import function
from engine.compiled import prepare
from gpu_layout import calls, launched
from sampling import Sampling
from weights import random_model
dtype = dtypes.float16 if sys.argv[1] == "half" else dtypes.float32
found = {}
for K in (4, 16):
  for name, sampling in (("temperature 1", Sampling()), ("top-k 50, top-p 0.9", Sampling(1.0, 50, 0.9))):
    target, draft = random_model("1,25,1600", dtype, seed=0), random_model("1,12,768", dtype, seed=1)
    prepare(target), prepare(draft)
    for call in calls(target, draft, K, sampling):
      found[f"{sys.argv[1]}, K={K}, {name}: {call[0]}"] = metal_check(*call)[1:]
class Kernel:  # a compiled call of one kernel, as gpu_layout.launched takes it
  def __init__(self, fn):
    self.name, self.signature, self.build = "control", "control", lambda searched: (fn, [])
def opted(x, *opts):  # x written by one kernel with these opts (as layout.fused gives them)
  return function(lambda x: x.contiguous(arg=opts))(x)
if sys.argv[2] == "controls":
  inputs = [Tensor.ones(64).contiguous().realize() for _ in range(32)]
  found["32 inputs"] = metal_check("32 inputs", Kernel(lambda: sum(inputs[1:], inputs[0]).contiguous()), [], 1, [])[1:]
  x = Tensor.ones(4096).contiguous().realize()
  found["2048 threads"] = metal_check("2048 threads", Kernel(lambda: opted(x + 1, Opt(OptOps.LOCAL, 0, 2048))), [], 1,
                                      [])[1:]
  Device[Device.DEFAULT].renderer.shared_max = 1 << 20  # past tinygrad's own check of local memory
  y = Tensor.ones(16, 4096).contiguous().realize()
  big = Kernel(lambda: opted(y.sum(-1), Opt(OptOps.GROUP, 0, 4096), Opt(OptOps.UPCAST, 0, 4)))
  found["64 KB"] = metal_check("64 KB", big, [], 1, [])[1:]
print(json.dumps(found))
"""

@pytest.fixture(scope="module")
def metal(tmp_path_factory) -> dict[str, list[str]]:
  """{config and call: its faults}, rendered for Metal in two fresh DEV=NULL:METAL processes at once
  (tinygrad's parallel compile workers off: they would import tinygrad's real Metal runtime)."""
  return two_processes(METAL, {"DEV": "NULL:METAL", "PARALLEL": "0"}, tmp_path_factory)

def test_every_kernel_is_within_metals_limits(metal):
  """Every kernel of Algorithm 1's step, a round and a lookup round (K = 4 and 16, float16 and float32, at
  temperature 1 and with top-k and top-p, gpt2-xl drafted by gpt2's shapes) has at most 1,024 threads a
  threadgroup, 32 KB of threadgroup memory and 31 buffers, Metal's limits, which tinygrad does not check."""
  calls = {k: v for k, v in metal.items() if ":" in k}
  assert len(calls) == 24 and not any(calls.values()), {k: v for k, v in calls.items() if v}

def test_the_metal_check_catches_each_limit(metal):
  """Negative controls: a kernel of 33 buffers, one of 2,048 threads a threadgroup and one of 64 KB of
  threadgroup memory must each fail its limit."""
  assert any("33 buffers" in f for f in metal["32 inputs"]), metal["32 inputs"]
  assert any("2048 threads a threadgroup" in f for f in metal["2048 threads"]), metal["2048 threads"]
  assert any("bytes of threadgroup memory, over 32768" in f for f in metal["64 KB"]), metal["64 KB"]
