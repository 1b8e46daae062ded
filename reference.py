"""Algorithm 2's round on the host, in float64 NumPy, line for line: the reference that the notebooks and some
tests walk by hand, one draw at a time. speculative.py runs the same lines as Tensor code on the model's device,
inside one compiled call per round; this file is what that code computes, written to be read.

    p = next_probs(draft, tokens, start_pos, 1, sampling)    # a model's distributions, copied to the host
    tokens, origins = verify(drafts, p, q, rng)              # Algorithm 2's accept/reject loop for one round
    token = sample(weights, rng)                             # one draw, by inverse CDF
"""
from __future__ import annotations
import numpy as np
from engine.compiled import PREFILL_ROWS, logits
from gpt2 import GPT2
from sampling import NOT_FINITE, Sampling

def next_probs(model: GPT2, tokens: list[int], start_pos: int, n_out: int, sampling: Sampling,
               rows: int = PREFILL_ROWS) -> np.ndarray:
  """Feed tokens at start_pos .. into model (writing its KV cache), in compiled steps of `rows` rows; the
  (n_out, V) distributions after the last n_out of them, in float64 on the host."""
  probs = logits(model, tokens, start_pos, last=n_out, head=sampling, rows=rows).astype(np.float64)
  # a NaN would make every draw meaningless (tinygrad's own multinomial silently returns token 0):
  # refuse it here
  if not np.isfinite(probs).all():
    raise FloatingPointError(NOT_FINITE)
  return probs

# ***** one round's accept/reject loop *****

def verify(drafts: list[int], p: np.ndarray, q: np.ndarray,
           rng: np.random.Generator) -> tuple[list[int], list[str]]:
  """Algorithm 2's accept/reject loop for one round: K drafts x̃ with their draft distributions p (K, V) and
  the target's K+1 distributions q (K+1, V). Returns the emitted tokens and where each came from: 'accepted'
  (a draft), 'resampled' (from the residual (q - p)+) or 'bonus' (from q after all K were accepted).

  p and q must come from the same Sampling (temperature, top-k, top-p applied alike to both), and then the
  tokens follow q. At temperature 0 both are one-hot, so this reduces to
  "accept while the two argmaxes agree, then emit the target's argmax": greedy speculative decoding,
  which emits exactly Algorithm 1's greedy tokens.
  With no drafts (a draft that found nothing to propose) it is one ordinary target step, labelled 'target'.
  """
  for t, x in enumerate(drafts):
    # Algorithm 2: "Sample r ~ U[0, 1] from a uniform distribution."
    r = rng.random()
    # Algorithm 2: "if r < min(1, q(x|x_1..x_{n+t-1}) / p(x|x_1..x_{n+t-1}))
    #               then Set x_{n+t} <- x̃_t and n <- n + 1."
    # Written as r·p < q: no division, and a draft the target gives probability 0 is never accepted.
    if r * p[t, x] < q[t, x]:
      continue
    # Algorithm 2: "sample x_{n+t} ~ (q(x|x_1..x_{n+t-1}) - p(x|x_1..x_{n+t-1}))+ and exit for loop."
    # The residual is normalised by sample(); it can only sum to 0 if p = q up to rounding,
    # and then q is exact.
    residual = np.maximum(q[t] - p[t], 0.0)
    token = sample(residual if residual.sum() > 0 else q[t], rng)
    return drafts[:t] + [token], ["accepted"] * t + ["resampled"]
  # Algorithm 2: "If all tokens x_{n+1}, ..., x_{n+K} are accepted,
  #               sample extra token x_{n+K+1} ~ q(x|x_1..x_n, x_{n+K})"
  return (drafts + [sample(q[len(drafts)], rng)],
          ["accepted"] * len(drafts) + ["bonus" if drafts else "target"])

def one_hot(drafts: list[int], V: int) -> np.ndarray:
  """The distributions p (K, V) of a deterministic draft: all the mass on each x̃.

  Then Algorithm 2's test r < min(1, q(x̃)/p(x̃)) reads r < q(x̃): x̃ is accepted with probability q(x̃);
  and the residual (q - p)+ is q with x̃ removed (renormalised by sample):
  after a rejection, any token but x̃, as q says.
  """
  p = np.zeros((len(drafts), V))
  p[np.arange(len(drafts)), drafts] = 1.0
  return p

# ***** one draw *****

CDF_BLOCK = 256  # sample() walks the CDF by blocks of this many tokens

def sample(weights: np.ndarray, rng: np.random.Generator) -> int:
  """Draw a token with probability weight / sum(weights), by inverse CDF with one uniform number from rng.

  The CDF is walked in two short steps, over blocks of CDF_BLOCK tokens and then inside the chosen block: the same
  draw as one cumulative sum over the whole vocabulary, but two short running sums (197 block totals, then 256
  tokens) instead of one of GPT-2's 50257 tokens, which matters as every draft token costs one draw. A
  zero-weight token is never drawn.
  """
  sums = np.add.reduceat(weights, np.arange(0, len(weights), CDF_BLOCK))  # each block's total
  cdf = np.cumsum(sums)
  u = rng.random() * cdf[-1]
  # float rounding can put u at the very end of a CDF: never step past the last token of positive weight
  b = min(int(np.searchsorted(cdf, u, side="right")), np.flatnonzero(sums).max(initial=0))
  block = weights[b * CDF_BLOCK:(b + 1) * CDF_BLOCK]
  u -= cdf[b - 1] if b else 0.0
  t = min(int(np.searchsorted(np.cumsum(block), u, side="right")), np.flatnonzero(block).max(initial=0))
  return b * CDF_BLOCK + t
