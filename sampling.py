"""From logits to the distributions that get sampled, and one draw from them.

    sampling = Sampling(temperature=0.8, top_k=50, top_p=0.95)   # checked on creation
    probs = model(ids, start_pos, head=sampling)                 # on the device, inside the model's
                                                                 # compiled call
    token = sample(probs.numpy()[0], rng)                        # on the host, with one seeded uniform number

Speculative sampling applies the same Sampling to the draft (giving p) and to the target (giving q) at every
position, so that Algorithm 2 compares like with like and emits the target's filtered distribution.
"""
from __future__ import annotations
from dataclasses import dataclass
import numpy as np
from typing import Callable
from tinygrad import Tensor, dtypes

@dataclass(frozen=True)
class Sampling:
  """How logits become a distribution: temperature, then top-k, then top-p.
  Temperature 0 is greedy (a one-hot argmax).

  Frozen, so it can key a model's compiled calls: equal settings share one compiled call.
  """
  temperature: float = 1.0
  top_k: int = 0      # keep the k most likely tokens (and any tied with the k-th); 0 is off
  top_p: float = 1.0  # keep the most likely tokens until their mass reaches top_p; 1 is off

  def __post_init__(self):
    if not self.temperature >= 0:
      raise ValueError(f"The temperature is {self.temperature}: it must be 0 (greedy) or more.")
    if self.top_k < 0:
      raise ValueError(f"top-k is {self.top_k}: it must be 0 (off) or more.")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"top-p is {self.top_p}: it must be in (0, 1], where 1 is off.")

  def __call__(self, logits: Tensor) -> Tensor:
    """Probabilities (..., V) from logits (..., V), each row summing to 1 in float32."""
    if self.temperature == 0:
      return logits.argmax(-1).one_hot(logits.shape[-1]).float()
    logits = logits / self.temperature
    if self.top_k:
      # keep the tokens whose logit is at least the k-th largest, ties with it included
      key = order_key(logits).contiguous()  # computed once: each pass of the search reads it
      def enough(t: Tensor) -> Tensor:
        return (key.unsqueeze(-2) >= t.unsqueeze(-1)).sum(-1) >= self.top_k
      kth = largest_where(enough, key.min(-1, keepdim=True), key.max(-1, keepdim=True) + 1)
      logits = (key >= kth).where(logits, float("-inf"))
    probs = logits.softmax(-1)
    if self.top_p < 1:
      # keep a token if the mass of the tokens more likely than it is < top_p; the cut-off's ties are kept
      probs = probs.contiguous()  # computed once, with its keys: each pass of the search reads them
      key = order_key(probs).contiguous()
      def mass_above(t: Tensor) -> Tensor:
        return (key.unsqueeze(-2) > t.unsqueeze(-1)).where(probs.unsqueeze(-2), 0.0).sum(-1) >= self.top_p
      dropped = largest_where(mass_above, key.min(-1, keepdim=True) - 1, key.max(-1, keepdim=True))
      probs = (key > dropped).where(probs, 0.0)
      probs = probs / probs.sum(-1, keepdim=True)
    return probs

def order_key(x: Tensor) -> Tensor:
  """A uint32 per float32 of x, in the same order (equal floats, equal keys): a float's bits order like an
  integer when it is positive, and in reverse when it is negative. So a cut-off found among the keys is
  exact."""
  bits = x.bitcast(dtypes.uint32)
  negative = bits >= 0x80000000
  return negative.where(0x80000000 - (bits & 0x7FFFFFFF), bits + 0x80000000)

def largest_where(holds: Callable[[Tensor], Tensor], lo: Tensor, hi: Tensor) -> Tensor:
  """Per row, the largest integer t in [lo, hi) with holds(t), where holds is true up to some t and false
  after it: lo must hold and hi must not.
  A search that quarters [lo, hi) at each step, testing 3 points in one pass over the row: 17 passes narrow
  any range of float32 keys (up to 2^32) to one, where sorting 50257 numbers costs far more."""
  quarters = Tensor([1, 2, 3], dtype=dtypes.uint32, device=lo.device)
  for _ in range(17):
    points = (lo + ((hi - lo) // 4 + 1) * quarters).minimum(hi)  # a step of at least 1, never past hi
    ok = holds(points)
    lo = ok.where(points, lo).max(-1, keepdim=True)
    hi = ok.logical_not().where(points, hi).min(-1, keepdim=True)
  return lo

BLOCK = 256  # sample() walks the CDF by blocks of this many tokens

def sample(weights: np.ndarray, rng: np.random.Generator) -> int:
  """Draw a token with probability weight / sum(weights), by inverse CDF with one uniform number from rng.

  The CDF is walked in two short steps, over blocks of BLOCK tokens and then inside the chosen block: the same
  draw as one cumulative sum over the whole vocabulary, but about 8 times faster for GPT-2's 50257 tokens,
  which matters as every draft token costs one draw. A zero-weight token is never drawn.
  """
  sums = np.add.reduceat(weights, np.arange(0, len(weights), BLOCK))  # each block's total
  cdf = np.cumsum(sums)
  u = rng.random() * cdf[-1]
  # float rounding can put u at the very end of a CDF: never step past the last token of positive weight
  b = min(int(np.searchsorted(cdf, u, side="right")), np.flatnonzero(sums).max(initial=0))
  block = weights[b * BLOCK:(b + 1) * BLOCK]
  u -= cdf[b - 1] if b else 0.0
  t = min(int(np.searchsorted(np.cumsum(block), u, side="right")), np.flatnonzero(block).max(initial=0))
  return b * BLOCK + t
