"""From logits to the distributions that get sampled, and one draw from them.

    sampling = Sampling(temperature=0.8, top_k=50, top_p=0.95)   # checked on creation
    probs = model(ids, start_pos, head=sampling)                 # on the device, inside the model's compiled call
    token = sample(probs.numpy()[0], rng)                        # on the host, with one seeded uniform number

Speculative sampling applies the same Sampling to the draft (giving p) and to the target (giving q) at every
position, so that Algorithm 2 compares like with like and emits the target's filtered distribution.
"""
from __future__ import annotations
from dataclasses import dataclass
import numpy as np
from tinygrad import Tensor

@dataclass(frozen=True)
class Sampling:
  """How logits become a distribution: temperature, then top-k, then top-p. Temperature 0 is greedy (a one-hot argmax).

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
      logits = (logits < logits.topk(self.top_k)[0][..., -1:]).where(float("-inf"), logits)  # ties with the k-th are kept
    probs = logits.softmax(-1)
    if self.top_p < 1:
      # a token is kept if the mass of the tokens more likely than it is < top_p
      s = probs.sort(-1, descending=True)[0]
      cutoff = ((s.cumsum(-1) - s) < self.top_p).where(s, 1.0).min(-1, keepdim=True)
      probs = (probs >= cutoff).where(probs, 0.0)
      probs = probs / probs.sum(-1, keepdim=True)
    return probs

BLOCK = 256  # sample() walks the CDF by blocks of this many tokens

def sample(weights: np.ndarray, rng: np.random.Generator) -> int:
  """Draw a token with probability weight / sum(weights), by inverse CDF with one uniform number from rng.

  The CDF is walked in two short steps, over blocks of BLOCK tokens and then inside the chosen block: the same
  draw as one cumulative sum over the whole vocabulary, but about 8 times faster for GPT-2's 50257 tokens, which
  matters as every draft token costs one draw. A zero-weight token is never drawn.
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
