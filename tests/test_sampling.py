"""sampling.py: top-k and top-p found without sorting give exactly the definitions' tokens; the draws (on the
device, speculative.draw; on the host, reference.sample) go by weight and never to a zero."""
import numpy as np, pytest
from tinygrad import Tensor
from reference import sample
from sampling import Sampling, largest_reaching
from speculative import draw, random_bits

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

def draws_by_weight(tokens: np.ndarray, weights: np.ndarray) -> None:
  counts = np.bincount(tokens, minlength=len(weights))
  assert counts[weights == 0].sum() == 0 and len(counts) == len(weights)
  expected = len(tokens) * weights / weights.sum()
  assert np.abs(counts - expected).max() < 6 * np.sqrt(expected.max())  # within 6 standard deviations

def test_draws_go_by_weight_and_never_to_a_zero():
  """40,000 draws from 1000 weights, every third one zero: on the device (in one batch) and on the host."""
  weights = np.random.default_rng(1).random(1000)
  weights[::3] = 0
  n = 40_000
  rows = Tensor(weights.astype(np.float32)).reshape(1, 1000).expand(n, 1000)
  draws_by_weight(draw(rows, random_bits(5, 0, 2 * n).reshape(n, 2)).numpy(), weights)
  rng = np.random.default_rng(0)
  draws_by_weight(np.array([sample(weights, rng) for _ in range(n)]), weights)

def test_a_draw_over_gpt2s_vocabulary_reaches_its_edges():
  """On GPT-2's 50257 tokens (no whole number of the CDF's blocks of 256): the first and last tokens and those
  on either side of a block's edge are drawn by weight, and nothing else."""
  weights = np.zeros(50257)
  weights[[0, 1, 255, 256, 257, 511, 512, 25000, 50175, 50176, 50255, 50256]] = np.arange(1, 13)
  n = 600
  rows = Tensor(weights.astype(np.float32)).reshape(1, -1).expand(n, 50257)
  draws_by_weight(draw(rows, random_bits(6, 0, 2 * n).reshape(n, 2)).numpy(), weights)

def test_a_draw_control_is_caught():
  """The same check rejects a draw that ignores the weights' shape (uniform over the nonzero tokens)."""
  weights = np.random.default_rng(1).random(1000) ** 4
  weights[::3] = 0  # the same check: its weights, with a uniform draw over their nonzero tokens
  uniform = (weights > 0).astype(np.float32)
  tokens = draw(Tensor(uniform).reshape(1, 1000).expand(40_000, 1000), random_bits(5, 0, 80_000).reshape(40_000, 2))
  with pytest.raises(AssertionError):
    draws_by_weight(tokens.numpy(), weights)

def edge_rows(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """For integer weights summing to a power of two at most 2**24 (so that float32 sums them exactly in any
  order, and each count, weight · 2**38 / total, is exact): the counts' running sums, values of u on either
  side of every edge between tokens (u = cdf[i] - 1 and cdf[i]) and at 0 and the total - 1, and random bits
  (n, 2) that give the draw those values of u."""
  cdf = np.cumsum(weights.astype(np.int64) << (38 - (int(weights.sum()).bit_length() - 1)))
  us = np.array(sorted({0, int(cdf[-1]) - 1} | {int(c) + d for c in cdf[weights > 0] for d in (-1, 0)}
                       - {int(cdf[-1])}), np.int64)
  R = us << 10  # u = floor(R · total / 2**48) for R = 2**24 hi + lo, which for total = 2**38 is R >> 10
  low = np.random.default_rng(len(weights)).integers(0, 256, (len(us), 2))  # bits that the draw drops
  bits = np.stack([(R >> 24) << 8 | low[:, 0], (R & 0xFFFFFF) << 8 | low[:, 1]], -1).astype(np.uint32)
  return cdf, us, bits

@pytest.mark.parametrize("V", [1, 5, 256, 300, 50257])
def test_a_draw_returns_the_inverse_cdfs_token_on_either_side_of_every_edge(V):
  """Given the same weights and random bits, the draw returns the token of the module docstring's inverse CDF
  on integer counts, exactly: the first whose running sum passes u, at both sides of every token's last count,
  with zero-weight tokens at the first, last and a block's edge (vocabularies that are and are not whole
  blocks of 256). Half the tokens weigh nothing; at GPT-2's 50257 all but about 1000 (two rows each), whole
  blocks among them. A control, the same CDF read one count off (the first running sum at least u), gives
  other tokens on these rows."""
  rng = np.random.default_rng(V)
  weights = rng.integers(0, max(2, 2**22 // V), V) * (rng.random(V) < min(0.5, 1000 / V))
  weights[[0, -1, min(255, V - 1)]] = 0
  weights[512:1280] = 0  # blocks 2 to 4 empty, where there are such blocks
  weights[V // 2] += 2**int(weights.sum()).bit_length() - weights.sum()  # the total a power of two
  assert weights.sum() == 2**(int(weights.sum()).bit_length() - 1) <= 2**24
  cdf, us, bits = edge_rows(weights)
  got = draw(Tensor(weights.astype(np.float32)).reshape(1, V).expand(len(bits), V), Tensor(bits)).numpy()
  np.testing.assert_array_equal(got, np.searchsorted(cdf, us, side="right"))
  assert V == 1 or (np.searchsorted(cdf, us, side="left") != got).any()

# --- the bit-by-bit search itself, on keys built to catch an off-by-one in any bit ---

def reaching_reference(key: np.ndarray, target: int, weight: np.ndarray | None) -> np.ndarray:
  """largest_reaching's definition, by brute force: per row, the largest key whose keys >= it weigh at least
  target, or 0 if none does."""
  weight = np.ones_like(key, dtype=np.int64) if weight is None else weight
  return np.array([[max([u for u in np.unique(k) if w[k >= u].sum() >= target], default=0)]
                   for k, w in zip(key.astype(np.int64), weight)], dtype=np.uint32)

def keys(kind: str, rng: np.random.Generator) -> np.ndarray:
  """3 rows of 40 uint32 keys below 2**30 (top-p's range) or 2**32."""
  if kind == "lowest bit":  # two values one apart: only the last bit decides
    return (0x80000000 + rng.integers(0, 2, (3, 40))).astype(np.uint32)
  if kind == "a few apart":  # neighbours across several low bits, a carry into bit 3 included
    return (0x7FFFFFF9 + rng.integers(0, 12, (3, 40))).astype(np.uint32)
  if kind == "extremes":  # 0, 1, the top bit alone, the largest keys
    return rng.choice(np.array([0, 1, 2, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF], np.uint32), (3, 40))
  if kind == "30 bits":  # float32 bits of probabilities, 1.0 (0x3F800000) and the smallest subnormal included
    k = rng.integers(0, 0x3F800000, (3, 40)).astype(np.uint32)
    k[:, :3] = [0x3F800000, 1, 0]
    return k
  return rng.integers(0, 2**32, (3, 40), dtype=np.uint64).astype(np.uint32)  # "spread"

@pytest.mark.parametrize("kind", ["lowest bit", "a few apart", "extremes", "30 bits", "spread"])
@pytest.mark.parametrize("weighted", [False, True])
def test_largest_reaching_finds_the_exact_key(kind, weighted):
  """Every target from 1 to past the total: the k-th largest key (ties counted), or the key where the
  weight from the top reaches target, down to its last bit."""
  rng = np.random.default_rng(len(kind) * 2 + weighted)
  key = keys(kind, rng)
  weight = rng.integers(0, 1000, key.shape) if weighted else None
  bits = 30 if kind == "30 bits" else 32
  total = int((np.ones_like(key) if weight is None else weight).sum(-1).min())
  targets = sorted({1, 2, 3, total // 3, total // 2, total - 1, total, total + 1} - {0})
  # all targets in one call (a Tensor of them: one compile), and the first as an int, as Sampling passes it
  weights = None if weight is None else Tensor(weight)
  every = largest_reaching(Tensor(key), Tensor(np.array(targets).reshape(-1, 1, 1)), bits, weights).numpy()
  one = largest_reaching(Tensor(key), targets[0], bits, weights).numpy()
  for target, got in [(targets[0], one), *zip(targets, every)]:
    np.testing.assert_array_equal(got, reaching_reference(key, target, weight), err_msg=f"target {target}")

# --- the filters at their edges ---

def ulps(start: float, n: int) -> np.ndarray:
  """n consecutive float32 values from start up: logits whose keys differ only in their lowest bits."""
  return (np.array(start, np.float32).view(np.int32) + np.arange(n, dtype=np.int32)).view(np.float32)

@pytest.mark.parametrize("row", ["one ulp apart", "negative, one ulp apart", "across zero", "all equal"])
def test_top_k_at_every_k_on_neighbouring_logits(row):
  """Logits one float apart (positive, negative, either side of 0, where -0.0 ties with 0.0): each k keeps
  exactly the logits >= the k-th largest."""
  rng = np.random.default_rng(7)
  logits = {"one ulp apart": ulps(1.0, 9), "negative, one ulp apart": -ulps(3.0, 9),
            "across zero": np.float32([-0.0, 0.0, 1e-45, -1e-45, 2e-45, -2e-45, 1e-38, -1e-38, 0.5]),
            "all equal": np.full(9, -2.5, np.float32)}[row]
  logits = np.stack([rng.permutation(logits) for _ in range(2)])
  for k in range(1, 10):
    got = Sampling(top_k=k)(Tensor(logits)).numpy()
    kth = np.sort(logits, -1)[:, [-k]]
    assert np.array_equal(got > 0, logits >= kth), f"k {k}"

def test_top_p_extremes():
  """A tiny top_p keeps the most likely token and its ties only; top_p just below 1 drops only the tokens
  whose mass is negligible next to 1 - top_p, and an all-equal row keeps everything either way."""
  logits = np.array([[2.0, 1.0, 2.0, 0.0, -30.0, 1.0],   # e^-32: 1e-14 of the mass
                     [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]], np.float32)
  tiny = Sampling(top_p=1e-7)(Tensor(logits)).numpy()
  assert np.array_equal(tiny > 0, [[1, 0, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
  np.testing.assert_allclose(tiny.sum(-1), 1, rtol=1e-6)
  most = Sampling(top_p=1 - 1e-6)(Tensor(logits)).numpy()  # float32 sums of probabilities err by ~1e-7
  assert np.array_equal(most > 0, [[1, 1, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1]])
