"""The decode step's kernels and bytes, for the gpt2 shape with its temperature-1 Sampling head: counted on
DEV=NULL, which runs no kernel (seconds, not minutes), without JIT graphs (bench.step_cost), which gives the
counts an H100 runs. A decode step is bound by its number of kernels as much as by its bytes, so these hold
what gpt2.py's layer norm and attention are shaped for."""
import os, subprocess, sys
from tiny import REPO

# One block's 11 kernels: ln_1's statistics; q, k, v (ln_1's normalisation inside its load); the KV write; the
# scores; their max; the sum of exp(scores - max); the product with v; c_proj; ln_2's statistics; c_fc; and
# c_proj (gelu inside its load). Around the 12 blocks, 10: the token ids, the embeddings, ln_f's statistics, the
# LM head and the Sampling head's softmax. Five rows add the causal mask and four token ids.
ONE_ROW_KERNELS = 12 * 11 + 10
FIVE_ROW_KERNELS = ONE_ROW_KERNELS + 10
MAX_BYTES = 1.05  # bytes the kernels touch ÷ the weights' bytes: each weight read once, little else

COUNT = """
import gpt2
from bench import step_cost
from sampling import Sampling
from weights import random_model
if {unpacked}:  # the control: each layer norm's weight and bias left in two buffers
  gpt2.LayerNorm.pack = lambda self: None
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
