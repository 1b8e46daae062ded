"""From logits to the distributions that get sampled: temperature, top-k and top-p, on the device.

    sampling = Sampling(temperature=0.8, top_k=50, top_p=0.95)   # checked on creation
    probs = sampling(model.forward(ids, start_pos))              # a Tensor (T, vocab): on the device, inside
                                                                 # the compiled call that runs it
    probs = compiled.logits(model, ids, start_pos, head=sampling)  # the same, compiled, read into NumPy

Speculative sampling applies the same Sampling to the draft (giving p) and to the target (giving q) at every
position, so that Algorithm 2 compares like with like and emits the target's filtered distribution.

top-k and top-p need a cut-off per row, found here without sorting: a search for the largest key t (a token's
logit or probability, as an integer of the same order) whose tokens at or above t are k many, or weigh top_p.
That count only falls as t grows, so t is built from its top bit down, a pass fixing a few bits by trying every
value they can take, all in one comparison over the row; keys and counts are integers, so the cut-off is
exactly the sorting definitions' (tests/test_nucleus.py holds it to a sort in NumPy). tinygrad's CPU device
fixes 3 bits a pass (largest_reaching), a device with workgroups 8 (largest_reaching_grouped): why, in
docs/benchmarks.md, "top-k and top-p cost no sort".

Then the draws, on the device too: random_bits, uniform r for the accept tests, and draw, one token per row.
What "exact" means for them: the tokens follow the distribution as the device computes it (float32
probabilities, each row normalised within float32 rounding; float16 models compute another q, close to it).
Each draw is an inverse CDF on integers: the weights become int64 counts of 2^-38 of their total (rounded to
nearest, from a float32 product: relative error 2^-24), whose running sums are exact, and a 48-bit uniform picks
one count exactly. So a token of probability w under the weights is drawn with probability w·(1 ± 2^-23) ± 2^-37.
Each accept test r·p(x̃) < q(x̃) takes r on a grid of 2^-24 in (0, 1) and one float32 product, so it accepts with
probability min(1, q/p) ± 2^-23.
"""
from __future__ import annotations
from dataclasses import dataclass
import math
from tinygrad import Tensor, UOp, dtypes
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.function import function
from engine.layout import workgroups

# the one sentence for non-finite probabilities, on the device (speculative.py) and the host (reference.py)
NOT_FINITE = ("The model produced NaN or infinite probabilities: its weights may be corrupt, so fetch them "
              "again.")

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
    return self.filtered(logits, workgroups(logits.device))

  def filtered(self, logits: Tensor, grouped: bool) -> Tensor:
    """__call__, with the search of a device with workgroups (grouped) or of tinygrad's CPU device: either
    keeps the same tokens, on any device (tests force each)."""
    if self.temperature == 0:
      return logits.argmax(-1).one_hot(logits.shape[-1]).float()
    logits = logits / self.temperature
    if self.top_k:
      # keep the tokens whose logit is at least the k-th largest, ties with it included
      key = order_key(logits)
      if grouped:  # each pass computes the key again inside its kernel: a kernel fewer
        cut, _ = largest_reaching_grouped(key, self.top_k, 32)
      else:
        key = key.contiguous()  # computed once: each pass of the search reads it
        cut = largest_reaching(key, self.top_k, 32)
      logits = (key >= cut).where(logits, float("-inf"))
    # after top-k, top-p's passes compute the probabilities again in their kernels only from 3 buffers (softmax)
    probs = softmax(logits) if grouped and self.top_k and self.top_p < 1 else logits.softmax(-1)
    if self.top_p < 1:
      # keep a token if the mass of the tokens more likely than it is < top_p: that keeps those at least as
      # likely as the cut-off, the least likely token the mass from the top needs to reach top_p, and its ties
      # on tinygrad's CPU device computed once, each pass of the search reading them; with workgroups each pass
      # computes them again in its own kernel, the same float32 operations (so the same bits): a kernel fewer
      if not grouped:
        probs = probs.contiguous()
      # probabilities are >= 0, so their float32 bits order like them, and being <= 1.0 (0x3F800000) they
      # fit in 30 bits: one pass fewer than order_key's 32
      key = probs.bitcast(dtypes.uint32)
      # the mass in integer units of 2**-40: integer sums vectorise where float ones may not be reordered, and
      # truncating each probability loses < 50257 * 2**-40 = 5e-8 in all, less than float32 sums lose to rounding
      mass = (probs * 2**40).cast(dtypes.int64)
      target = math.ceil(self.top_p * 2**40)
      if grouped:
        # the search also returns the mass it kept, >= target: dividing by it instead of by a float32 sum
        # of the kept probabilities saves that sum's two kernels, and it errs by less than the < 5e-8 that
        # truncation loses, over a mass of at least top_p
        cut, kept = largest_reaching_grouped(key, target, 30, mass)
        return (key >= cut).where(probs * 2**40 / kept.float(), 0.0)
      probs = (key >= largest_reaching(key, target, 30, mass)).where(probs, 0.0)
      probs = probs / probs.sum(-1, keepdim=True)
    return probs

def softmax(logits: Tensor) -> Tensor:
  """logits.softmax(-1), the same float32 operations, its max and sum written by one kernel into one buffer:
  tinygrad computes probabilities inside each kernel that reads them, not in one of their own, only where they
  read at most 3 buffers (remove_bufferize in tinygrad/schedule/rangeify.py), and after top-k they read the
  logits, top-k's cut-off and these two."""
  m = logits.max(-1, keepdim=True)
  m, total = Tensor.stack(m, (logits - m).exp().sum(-1, keepdim=True)).contiguous()
  return (logits - m).exp() / total

def order_key(x: Tensor) -> Tensor:
  """A uint32 per float32 of x, in the same order (equal floats, equal keys): a float's bits order like an
  integer when it is positive, and in reverse when it is negative. So a cut-off found among the keys is
  exact."""
  bits = x.bitcast(dtypes.uint32)
  negative = bits >= 0x80000000
  return negative.where(0x80000000 - (bits & 0x7FFFFFFF), bits + 0x80000000)

# Bits fixed per pass of largest_reaching, the search of tinygrad's CPU device. A pass costs two kernel launches
# plus arithmetic in proportion to its 2**STEP - 1 candidates, which on the CPU run on a core or two: there 3 (11
# passes for 32 bits) ran fastest, against 2 and 4 (docs/benchmarks.md, "top-k and top-p cost no sort")
STEP = 3

def largest_reaching(key: Tensor, target: int | Tensor, bits: int, weight: Tensor | None = None) -> Tensor:
  """Per row of key (..., V), uint32 below 2**bits, the largest t whose keys >= t weigh at least target
  (weight: integers, one per key; None counts the keys), or 0 if no t does. target is an int, or a Tensor of
  shape (n, ..., 1) for n targets at once (the result then (n, ..., 1)). That t is a key, the cut-off: with
  the keys counted and target k, the k-th largest key (ties counted); with probability masses and target p,
  the least likely key that the mass from the top needs to reach p.

  As t grows the weight of the keys >= t only falls, so t is built from the top bit down, keeping at each
  bit the largest value that still reaches target. One pass fixes STEP bits by testing all their nonzero
  values in one comparison over the row: ceil(bits / STEP) reads of the row, where sorting 50257 numbers
  costs far more, and exact, as the keys are exact."""
  t = Tensor.zeros(*key.shape[:-1], 1, dtype=dtypes.uint32, device=key.device)
  for high in range(bits, 0, -STEP):
    low = max(high - STEP, 0)  # the last pass may fix fewer bits
    candidates = t + Tensor.arange(1, 1 << (high - low), dtype=dtypes.uint32) * (1 << low)
    above = key.unsqueeze(-2) >= candidates.unsqueeze(-1)
    reach = (above if weight is None else above.where(weight.unsqueeze(-2), 0)).sum(-1) >= target
    # the candidates that reach target are the smallest, 1..n of them: t + n << low is the largest
    t = t + reach.sum(-1, keepdim=True).cast(dtypes.uint32) * (1 << low)
  return t

# The search of a device with workgroups (a GPU), where a step's time goes mostly to launching its kernels and
# a pass's 255 candidates take threads the device has to spare: 8 bits a pass, 4 passes of two kernels for 32
# bits, not 11 (docs/benchmarks.md, "top-k and top-p cost no sort"). tinygrad splits a sum of 32768 or more
# numbers into two kernels (split_reduceop in tinygrad/schedule/rangeify.py), so a row is summed as parts of at
# most SPLIT + GROUP - 1 keys, each by a workgroup of GROUP threads that meet in local memory.
SPLIT, GROUP = 32768 - 256, 256

def largest_reaching_grouped(key: Tensor, target: int | Tensor, bits: int,
                             weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
  """largest_reaching's t, found in passes of 8 bits, and the weight of the keys >= t (the total where t is
  0), both int64 of largest_reaching's shape: the search of a device with workgroups, two kernels a pass.

  Each pass tests t itself and its 255 successors c = t + i << low in one comparison over the row: one
  kernel adds up, for every c, the weight of the keys >= c, a workgroup of threads to each sum; the next
  keeps the largest c that reaches target, and its weight (the smallest that reaches: weights fall as c
  grows). t reached target in the pass before (or is 0, which reaches by definition), so some c does."""
  *lead, V = key.shape
  parts = -(-V // SPLIT)  # a row as parts of at most SPLIT keys, each summed by one workgroup
  part = -(-V // (parts * GROUP)) * GROUP
  pad = ((0, 0),) * len(lead) + ((0, parts * part - V),)  # keys 0 that weigh 0
  key = key.pad(pad).reshape(*lead, 1, parts, part)
  if weight is None:  # count the keys: each weighs 1, the padding's 0
    weight = (Tensor.arange(parts * part) < V).reshape(parts, part).cast(dtypes.int32)
  else:
    weight = weight.pad(pad).reshape(*lead, 1, parts, part)
  t: int | Tensor = 0  # a Tensor (..., 1) after the first pass
  for high in range(bits, 0, -8):
    low = max(high - 8, 0)  # the last pass may fix fewer bits
    c = t + Tensor.arange(1 << (high - low), dtype=dtypes.int64) * (1 << low)  # (..., 2**(high - low))
    above = key >= c.cast(dtypes.uint32).unsqueeze(-1).unsqueeze(-1)
    weighs = counted(above.where(weight, 0).sum(-1)).sum(-1).cast(dtypes.int64)
    reach = (weighs >= target) | (c == 0)  # t = 0 reaches by definition
    # the largest c that reaches, and the smallest weight that does, as the max of a pair: one kernel
    t, at_t = Tensor.stack(reach.where(c, 0), reach.where(-weighs, -2**62), dim=-1).max(-2).split(1, -1)
    at_t = -at_t
  return t, at_t

def counted(sums: Tensor) -> Tensor:
  """sums (a sum over each part of a row), written by one kernel in which each sum is a workgroup's: on a device
  without workgroups (where only tests call the grouped search), tinygrad's own kernels."""
  if not workgroups(sums.device):
    return sums
  return function(lambda sums: sums.contiguous(arg=(Opt(OptOps.GROUP, 0, GROUP),)))(sums)

# ***** random numbers and draws *****

def random_bits(seed: int | UOp, counter: int | UOp, n: int) -> Tensor:
  """n random uint32 from tinygrad's threefry generator (the one behind Tensor.rand), keyed by (seed,
  counter): passed into the compiled call, since Tensor.manual_seed does not reach a captured TinyJit."""
  key = Tensor.full((1,), seed, dtype=dtypes.uint32).cat(Tensor.full((1,), counter, dtype=dtypes.uint32))
  half = (n + 1) // 2
  counts = Tensor.arange(half, dtype=dtypes.uint32)
  return Tensor._threefry_random_bits(key, counts, counts + half)[:n]

def uniform(bits: Tensor) -> Tensor:
  """Floats r in (0, 1) from uint32 bits: the top 24 bits and half a step, times 2^-24 (exact in float32)."""
  return ((bits >> 8).cast(dtypes.float32) + 0.5) * 2.0**-24

def draw(weights: Tensor, bits: Tensor) -> Tensor:
  """One token per row of weights (..., V) (non-negative, not all zero), by inverse CDF with 48 random bits
  (..., 2) per row: int32 (...,). The weights become int64 counts whose running sums are exact, so the only
  error is the float32 rounding of each count (the module's docstring)."""
  V, B = weights.shape[-1], 256  # the CDF is walked by blocks of B tokens, then inside the chosen block
  counts = (weights * (2.0**38 / weights.sum(-1, keepdim=True))).round().cast(dtypes.int64)
  total = counts.sum(-1, keepdim=True)
  # u, uniform on 0 .. total-1: floor(R · total / 2^48) for a 48-bit R = 2^24 hi + lo, in 63 bits
  hi, lo = [(bits[..., i:i + 1] >> 8).cast(dtypes.int64) for i in (0, 1)]
  u = (hi * total + ((lo * total) >> 24)) >> 24
  # each running sum written out before the next step reads it: computed inside its reader, it would be redone
  # by one thread for every number that thread reads (a GPU thread walking the whole CDF alone)
  blocks = counts.pad(((0, 0),) * (counts.ndim - 1) + ((0, -V % B),)).reshape(*counts.shape[:-1], -1, B)
  sums = blocks.sum(-1)
  block = (sums.cumsum(-1).contiguous() <= u).sum(-1, keepdim=True)  # the block whose counts hold u
  index = Tensor.arange(sums.shape[-1])
  u = u - (index < block).where(sums, 0).sum(-1, keepdim=True)
  inside = (index == block).unsqueeze(-1).where(blocks, 0).sum(-2).contiguous().cumsum(-1).contiguous()
  return (block.squeeze(-1) * B + (inside <= u).sum(-1)).cast(dtypes.int32)
