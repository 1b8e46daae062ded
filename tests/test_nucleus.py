"""sampling.py's two searches, the CPU device's (largest_reaching, 3 bits a pass) and that of a device with
workgroups (largest_reaching_grouped, 8 bits a pass), each forced on whatever device the tests run: both keep
exactly the tokens a sort in NumPy keeps, on rows built to be hard, given the probabilities the device computed."""
import math
import numpy as np, pytest
from tinygrad import Tensor
from sampling import Sampling, largest_reaching_grouped
from test_sampling import keys, reaching_reference

V = 1000

def hard_rows() -> np.ndarray:
  """(8, V) logits: ties at the k-th and at top-p's cut-off, a row where top-k 3 and top-p 0.9 cut at the same
  token, nine tokens that weigh about 0.9 together, an all-equal row, and random rows."""
  rng = np.random.default_rng(66)
  rows = rng.normal(-12, 2, (8, V)).astype(np.float32)  # a tail of little mass under the tokens set below
  rows[0, :6] = [5, 4, 4, 4, 4, 3]            # the 3rd largest tied with 2 more; top-p's cut among the ties
  rows[1, :3] = [5, 4.9, 4.8]                 # top-k 3 and top-p 0.9 both cut at the 3rd token
  rows[2] = np.log(np.r_[np.full(9, 0.1), 0.05, np.full(V - 10, 0.05 / (V - 10))])  # 9 of 0.1, one of 0.05
  rows[3] = np.full(V, 0.5, np.float32)       # all tied: every filter keeps every token
  rows[4:6] = np.round(rng.normal(0, 3, (2, V)))  # many ties everywhere
  rows[6:] = rng.normal(0, 3, (2, V))
  return rows

def top_k_reference(logits: np.ndarray, k: int) -> np.ndarray:
  """Which tokens top-k keeps: those at least as large as the k-th largest (every token where k >= V)."""
  return logits >= np.sort(logits, -1)[:, [-min(k, logits.shape[-1])]]

def top_p_reference(probs: np.ndarray, p: float) -> np.ndarray:
  """Which tokens top-p keeps, by sorting the device's probabilities: those at least as likely as the first in
  descending order at which the running mass (each probability in sampling.py's units of 2**-40, truncated)
  reaches p, and all of them if it never does."""
  mass = (probs * np.float32(2**40)).astype(np.int64)
  order = np.argsort(-probs, -1, kind="stable")
  running = np.cumsum(np.take_along_axis(mass, order, -1), -1)
  reached = running >= math.ceil(p * 2**40)
  cut = np.where(reached.any(-1), np.take_along_axis(probs, order, -1)[np.arange(len(probs)), reached.argmax(-1)], 0)
  return probs >= cut[:, None]

# top-k and top-p together (the same token, ties), either alone, k at the vocabulary and past it
SETTINGS = [(3, 0.9), (50, 0.9), (0, 0.9), (2, 1.0), (V, 0.5), (V + 3, 0.8)]

@pytest.mark.parametrize("grouped", [False, True], ids=["CPU's search", "workgroups' search"])
@pytest.mark.parametrize("k,p", SETTINGS)
def test_filters_keep_what_a_sort_keeps_on_hard_rows(k, p, grouped):
  """The kept tokens are exactly the sort's, given the probabilities the device computed before top-p (after
  top-k), and they are those probabilities renormalised: in proportion, summing to 1 within float32 sums'
  rounding (the CPU's search divides by one: 1000 probabilities of 0.001 sum to 1 - 9e-6 in float32)."""
  logits = hard_rows()
  kept = top_k_reference(logits, k) if k else np.ones(logits.shape, bool)
  before = Sampling(1.0, k, 1.0).filtered(Tensor(logits), grouped).numpy()  # the probabilities top-p reads
  assert np.array_equal(before > 0, kept & (before > 0))
  if p < 1:
    kept &= top_p_reference(before, p)
  got = Sampling(1.0, k, p).filtered(Tensor(logits), grouped).numpy()
  assert np.array_equal(got > 0, kept & (before > 0))
  ratio = np.where(got > 0, got / np.where(got > 0, before, 1), np.nan)
  np.testing.assert_allclose(np.nanmax(ratio, -1), np.nanmin(ratio, -1), rtol=1e-6)
  np.testing.assert_allclose(got.sum(-1), 1, rtol=2e-5)

def test_the_hard_rows_are_hard():
  """Row 0's top-p cut-off is tied, and row 1's is top-k's."""
  probs = Sampling().filtered(Tensor(hard_rows()), False).numpy()
  assert top_p_reference(probs, 0.9)[0].sum() == 5  # 5, 4, 4, 4, 4: the cut among the four tied at 4
  after_k = Sampling(top_k=3).filtered(Tensor(hard_rows()), False).numpy()
  assert top_p_reference(after_k, 0.9)[1].sum() == 3

@pytest.mark.parametrize("grouped", [False, True], ids=["CPU's search", "workgroups' search"])
def test_top_p_at_the_mass_of_the_top_nine_tokens_and_one_unit_more(grouped):
  """top_p exactly the mass (in sampling.py's units of 2**-40) of row 2's nine most likely tokens keeps those
  nine; one unit more keeps the tenth too: a cut-off decided by the last unit of the mass."""
  logits = hard_rows()
  probs = Sampling().filtered(Tensor(logits), False).numpy()
  mass = (probs * np.float32(2**40)).astype(np.int64)
  nine = int(np.sort(mass[2])[::-1][:9].sum())
  for target, kept in [(nine, 9), (nine + 1, 10)]:
    got = Sampling(top_p=target / 2**40).filtered(Tensor(logits), grouped).numpy()
    assert (got[2] > 0).sum() == kept
    assert np.array_equal(got > 0, top_p_reference(probs, target / 2**40) & (probs > 0))

@pytest.mark.parametrize("kind", ["lowest bit", "a few apart", "extremes", "30 bits", "spread"])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_grouped_search_finds_the_exact_key_and_its_weight(kind, weighted):
  """Every target from 1 to past the total, in one call: the key largest_reaching's definition gives, down to
  its last bit, and the weight of the keys at least that key (the total where no key reaches)."""
  rng = np.random.default_rng(len(kind) * 2 + weighted)
  key = keys(kind, rng)
  weight = rng.integers(0, 1000, key.shape) if weighted else np.ones(key.shape, np.int64)
  total = int(weight.sum(-1).min())
  targets = sorted({1, 2, 3, total // 3, total // 2, total - 1, total, total + 1} - {0})
  t, reached = largest_reaching_grouped(Tensor(key), Tensor(np.array(targets).reshape(-1, 1, 1)),
                                        30 if kind == "30 bits" else 32, Tensor(weight) if weighted else None)
  for target, got_t, got_w in zip(targets, t.numpy(), reached.numpy()):
    want = reaching_reference(key, target, None if not weighted else weight)
    np.testing.assert_array_equal(got_t, want, err_msg=f"target {target}")
    np.testing.assert_array_equal(got_w[:, 0], [w[k >= u].sum() for k, w, u in zip(key, weight, want[:, 0])])

COUNT = """
import json
from tools.bench import step_cost
from sampling import Sampling
from weights import random_model
model = random_model("2,2,64")  # the demo draft's shape: the filters' kernels do not depend on the layers
settings = {"none": Sampling(), "top-k": Sampling(top_k=50), "top-p": Sampling(top_p=0.9),
            "both": Sampling(top_k=50, top_p=0.9)}
print(json.dumps({name: [step_cost(model, rows, s)[0] for rows in (1, 5)] for name, s in settings.items()}))
"""

@pytest.mark.slow
def test_on_a_gpu_the_filters_add_at_most_8_kernels_each_and_16_together(tmp_path):
  """Compiled for an H100 (DEV=NULL:CUDA:sm_90, NVRTC), a step of 1 row and of 5: top-k 50 and top-p 0.9 each add
  at most 8 kernels to the unfiltered step, both together at most 16 (the CPU's search would add 28, 27, 55)."""
  import json, os, subprocess, sys
  from test_kernels import nvrtc_path
  from tiny import REPO
  if nvrtc_path() is None:
    pytest.skip("NVRTC is not installed: pip install -r requirements-cuda.txt")
  env = {**os.environ, "DEV": "NULL:CUDA:sm_90", "NVRTC_PATH": nvrtc_path(), "NULL_ALLOW_COPYOUT": "1", "BEAM": "0",
         "CACHEDB": str(tmp_path / "cache.db"), "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
  out = subprocess.run([sys.executable, "-c", COUNT], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
  assert out.returncode == 0, out.stderr
  counts = json.loads(out.stdout.strip().splitlines()[-1])
  added = {name: [n - none for n, none in zip(counts[name], counts["none"])] for name in ("top-k", "top-p", "both")}
  assert max(added["top-k"] + added["top-p"]) <= 8 and max(added["both"]) <= 16, counts
