"""sampling.py: top-k and top-p found without sorting give exactly the definitions' tokens; sample() draws by
weight."""
import numpy as np, pytest
from tinygrad import Tensor
from sampling import Sampling, sample

def reference(logits: np.ndarray, k: int, p: float) -> tuple[np.ndarray, np.ndarray]:
  """The definitions in NumPy, by sorting: top-k keeps logits >= the k-th largest; top-p keeps a token if the
  mass of the tokens sorted before it is < p.
  Returns the probabilities and, per token, the mass strictly above it."""
  z = logits.astype(np.float32)
  if k:
    kth = np.sort(z, -1)[..., -min(k, z.shape[-1])][..., None]
    z = np.where(z < kth, -np.inf, z)
  e = np.exp(z - z.max(-1, keepdims=True))
  probs = e / e.sum(-1, keepdims=True)
  above = np.stack([[row[row > x].sum() for x in row] for row in probs.astype(np.float64)])
  if p < 1:
    s = -np.sort(-probs, -1)
    cut = np.where(np.cumsum(s, -1) - s < p, s, 1.0).min(-1, keepdims=True)
    probs = np.where(probs >= cut, probs, 0)
    probs = probs / probs.sum(-1, keepdims=True)
  return probs, above

# k = 1, a middle k, k = V and past it; p keeping one token, about half, most; both together
CASES = [(V, 3, k, p, ties) for V in (6, 2000)
         for k, p in [(1, 1.0), (5, 1.0), (V, 1.0), (0, 0.01), (0, 0.5), (0, 0.9),
                      (3, 0.9), (V + 3, 0.8)]
         for ties in (False, True)]

@pytest.mark.parametrize("V,rows,k,p,ties", CASES)
def test_filters_keep_exactly_the_definitions_tokens(V, rows, k, p, ties):
  """Same kept tokens as the sorting definitions, ties with the k-th (or with the top-p cut-off) kept. top-p
  decides on float32 sums, as any implementation does: a token whose mass-above is within 1e-5 of p may fall
  either side."""
  rng = np.random.default_rng(V * 100 + rows * 10 + k)
  logits = rng.normal(0, 3, (rows, V)).astype(np.float32)
  if ties:
    logits = np.round(logits)  # many equal logits, so the k-th and the cut-off have ties
  got = Sampling(1.0, k, p)(Tensor(logits)).numpy()
  want, above = reference(logits, k, p)
  near_cut = np.abs(above - p) < 1e-5
  assert np.array_equal((got > 0) | near_cut, (want > 0) | near_cut)
  if not near_cut.any():
    np.testing.assert_allclose(got, want, atol=1e-6)

def test_full_vocabulary_top_k_with_ties():
  """GPT-2's vocabulary size, a block of tied logits straddling the k-th: all the tied ones are kept."""
  logits = np.random.default_rng(1).normal(0, 1, (2, 50257)).astype(np.float32)
  logits[:, :10] = 9.0
  logits[:, 10:30] = 8.0  # the 15th largest is 8.0, tied with 19 others
  got = Sampling(top_k=15)(Tensor(logits)).numpy()
  assert np.array_equal(got > 0, np.broadcast_to(np.arange(50257) < 30, got.shape))

def test_sample_draws_by_weight_and_never_a_zero():
  rng = np.random.default_rng(0)
  weights = np.random.default_rng(1).random(1000)
  weights[::3] = 0
  counts = np.bincount([sample(weights, rng) for _ in range(40_000)], minlength=1000)
  assert counts[::3].sum() == 0
  expected = 40_000 * weights / weights.sum()
  assert np.abs(counts - expected).max() < 6 * np.sqrt(expected.max())  # within 6 standard deviations
