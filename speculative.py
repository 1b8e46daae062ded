"""Speculative sampling with GPT-2 in tinygrad: Algorithm 2 of Chen et al. (2023),
and Algorithm 1 as the baseline.

    python speculative.py --prompt "Alan Turing theorized that computers would one day become"   # see cli.py

Notation as in the paper: q is the target model (GPT-2 1.5B by default), p the draft model (GPT-2 124M),
K the lookahead, x̃ a draft token. Leviathan et al. (2022) swap the letters: their p is the target.
Positions: the paper counts tokens from 1 (x_1 .. x_n); the code's lists and KV-cache positions count from 0,
so the paper's x_n is x[n - 1] and sits at cache position n - 1.

Where the work runs: all of Algorithm 2 runs on tinygrad's device (Metal, CUDA or the CPU), as Tensor code
compiled once: a round (the draft's K steps, the target's K+1 rows, the K accept/reject tests, the residual or
bonus draw) is one compiled call, and the host reads back a few numbers: the emitted tokens, how many drafts
were accepted, and a flag for non-finite probabilities. Algorithm 1 is one compiled call per token, with its
draw on the device too. reference.py holds the same round in float64 NumPy, to read and to walk by hand.

What "exact" means here: the tokens follow the target's distribution q as the device computes it (float32
probabilities, each row normalised within float32 rounding; float16 models compute another q, close to it).
Each draw is an inverse CDF on integers: the weights become int64 counts of 2^-38 of their total (rounded to
nearest, from a float32 product: relative error 2^-24), whose running sums are exact, and a 48-bit uniform
picks one count exactly. So a token of probability w under the weights is drawn with probability
w·(1 ± 2^-23) ± 2^-37. Each accept test r·p(x̃) < q(x̃) takes r on a grid of 2^-24 in (0, 1) and one
float32 product, so it accepts with probability min(1, q/p) ± 2^-23. The random bits come from tinygrad's threefry
generator keyed by (seed, round), so the same seed gives the same tokens on the same device, run after run.
"""
from __future__ import annotations
import hashlib, pathlib, time
from typing import Callable, Protocol
import numpy as np
from tinygrad import Device, Tensor, UOp, Variable, dtypes
from compiled import PREFILL_ROWS, Compiled, forward_rows, kept, prepare, searching, signature, step, symbolic_ids
from compiled import width
from costs import Stats
from gpt2 import GPT2, MAX_ROWS
from layout import padded_vocab
from sampling import Sampling

EOT = 50256  # GPT-2's <|endoftext|>
SEED_MAX = 2**31 - 1  # seeds and round counters enter compiled calls as Variables of this range
# what a compiled round's kernels depend on besides the models' own (compiled.SOURCE): this file
SOURCE = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]

# ***** random numbers and draws, on the device *****

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
  error is the float32 rounding of each count (see the module's docstring)."""
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

def row(x: Tensor, i: Tensor) -> Tensor:
  """Row i[...] of x (..., R, V): (..., V). A masked sum, so a NaN in another row stays out."""
  mask = Tensor.arange(x.shape[-2]) == i.unsqueeze(-1)
  return mask.unsqueeze(-1).where(x, 0).sum(-2)

def flagged(result: Tensor, *probs: Tensor) -> Tensor:
  """What a compiled call returns: its int32 result, then 1 if any row of any of probs sums to NaN or infinity
  (corrupt weights), else 0."""
  # the sums written out first: left inside the result's kernel, each of its threads would redo every row's sum
  sums = Tensor.cat(*[p.sum(-1).flatten() for p in probs]).contiguous()
  return result.cat((sums.isnan() | sums.isinf()).max().cast(dtypes.int32).reshape(1)).contiguous()

# ***** Algorithm 2's lines, as Tensor code *****

def sample_draft(p_t: Tensor, bits: Tensor) -> Tensor:
  """Algorithm 2: "Sample draft auto-regressively x̃_t ~ p(x|x_1, ..., x_n, x̃_1, ..., x̃_{t-1})"."""
  return draw(p_t, bits)

def score(target: GPT2, ids: Tensor, start_pos: UOp, sampling: Sampling, searched: bool) -> Tensor:
  """Algorithm 2: "In parallel, compute K + 1 sets of logits from drafts x̃_1, ..., x̃_K:
  q(x|x_1, ..., x_n), q(x|x_1, ..., x_n, x̃_1), ..., q(x|x_1, ..., x_n, x̃_1, ..., x̃_K)":
  one pass of the target on [x_n, x̃_1, ..., x̃_K] from cache position n-1, then the draft's Sampling."""
  # the target's compiled step of K+1 rows, padding included (compiled.forward_rows): the kernels that r is
  # timed on; the padding rows are dropped after they are realized
  return forward_rows(target, ids, start_pos, sampling, searched)[:ids.shape[0]]

def accept(r: Tensor, p_x: Tensor, q_x: Tensor) -> Tensor:
  """Algorithm 2: "if r < min(1, q(x|x_1, ..., x_{n+t-1}) / p(x|x_1, ..., x_{n+t-1}))" as r·p < q: no
  division, and a draft that the target gives probability 0 is never accepted."""
  return r * p_x < q_x

def residual(q_t: Tensor, p_t: Tensor) -> Tensor:
  """Algorithm 2: "sample x_{n+t} ~ (q(x|x_1, ..., x_{n+t-1}) − p(x|x_1, ..., x_{n+t-1}))+": the weights
  (draw normalises them). They sum to 0 only if p = q up to rounding, and then q is exact."""
  weights = (q_t - p_t).maximum(0)
  return (weights.sum(-1, keepdim=True) > 0).where(weights, q_t)

def verify(drafts: Tensor, p: Tensor, q: Tensor, k: int | UOp, bits: Tensor) -> Tensor:
  """Algorithm 2's accept/reject loop for one round (or a batch of them): drafts x̃ (..., K) int32 drawn
  from p (..., K, V), the target's q (..., K+1, V), of which the first k drafts count (fewer near the
  context's end), and K+2 random uint32 (..., K+2). Returns int32 (..., K+2): the K+1 tokens x̃_1 .. x̃_a, x
  (stale past x), then a, how many drafts were accepted; x is the residual draw after the first rejection,
  or the bonus from q.

  p and q must come from the same Sampling (temperature, top-k, top-p applied alike to both), and then the
  tokens follow q. At temperature 0 both are one-hot, so this accepts while the two argmaxes agree and then
  emits the target's argmax: exactly Algorithm 1's greedy tokens."""
  K = drafts.shape[-1]
  t = Tensor.arange(K)
  # Algorithm 2: "for t = 1 : K do" (all K tests at once; the first rejection ends the loop, below)
  # "Sample r ~ U[0, 1] from a uniform distribution."
  r = uniform(bits[..., :K])
  # p(x̃) and q(x̃), written out: each is a sum over the vocabulary, which every later kernel would redo
  p_x = p.gather(-1, drafts.unsqueeze(-1)).squeeze(-1).contiguous()
  q_x = q[..., :K, :].gather(-1, drafts.unsqueeze(-1)).squeeze(-1).contiguous()
  # "if r < min(1, q(x|x_1, ..., x_{n+t-1}) / p(x|x_1, ..., x_{n+t-1})), then"
  # "Set x_{n+t} ← x̃_t and n ← n + 1."
  # else: the loop stops at the first rejection, so a = the index of the first draft rejected (k if none is)
  accepted = accept(r, p_x, q_x) & (t < k)
  a = (~accepted).where(t, K).min(-1)
  # after a rejection (a < k):
  # "sample x_{n+t} ~ (q(x|x_1, ..., x_{n+t-1}) − p(x|x_1, ..., x_{n+t-1}))+ and exit for loop."
  # after all k were accepted:
  # "If all tokens x_{n+1}, ..., x_{n+K} are accepted, sample extra token x_{n+K+1} ~ q(x|x_1, ..., x_n, x_{n+K})
  #  and set n ← n + 1."
  # Its indices count n as it stood before the round, though the loop advanced it once per acceptance: the
  # extra token follows x_n and the K drafts, so it is drawn from q's row K (row a), with no p to take away.
  p_a = (a < k).unsqueeze(-1).where(row(p, a.minimum(K - 1)), 0)
  x = draw(residual(row(q, a), p_a), bits[..., K:K + 2])
  # the round's tokens: x̃_1 .. x̃_a, then x (what follows x is never read)
  x = x.unsqueeze(-1)
  tokens = (Tensor.arange(K + 1) == a.unsqueeze(-1)).where(x, drafts.cat(x, dim=-1))
  return tokens.cat(a.unsqueeze(-1), dim=-1).cast(dtypes.int32)

# ***** one compiled call per round (and per token for Algorithm 1) *****

def model_work(first: Tensor, later: Callable[[int, Tensor], Tensor], scored: Callable[[Tensor], Tensor], j: UOp,
               k: UOp, seed: UOp, counter: UOp, K: int) -> Tensor:
  """A round with a model draft, around the rows of its models' steps: the draft's first (the last two tokens of
  x: the draft may lack both, after a round that accepted every draft it never fed x̃_K), whose row j is read (1;
  0 when x is one token, fed twice), later(t, x̃_t) the draft's later ones, scored(x̃) the target's K+1 rows.
  Its own work: the draws of x̃, the tests, the last draw; int32 (K+3,): the tokens, a and the NaN flag."""
  bits = random_bits(seed, counter, 3 * K + 2).realize()  # realized once, or each use would recompute it
  drafts, p, rows = [], [], Tensor.full((1,), j, dtype=dtypes.int32)
  # Algorithm 2: "for t = 1 : K do"
  for t in range(K):
    # "Sample draft auto-regressively x̃_t ~ p(x|x_1, ..., x_n, x̃_1, ..., x̃_{t-1})"
    p.append((later(t, drafts[-1]) if t else first)[rows])
    drafts.append(sample_draft(p[-1], bits[K + 2 + 2 * t:K + 4 + 2 * t].reshape(1, 2)))
    # realized step by step inside the compiled call: the same kernels, but scheduled as K small graphs, which
    # tinygrad compiles several times faster than one graph of K steps
    Tensor.realize(p[-1], drafts[-1])
    rows = Tensor.zeros(1, dtype=dtypes.int32)
  drafts, p = Tensor.cat(*drafts), Tensor.cat(*p)
  q = scored(drafts).realize()
  return flagged(verify(drafts, p, q, k, bits[:K + 2]), p, q)

def lookup_work(q: Tensor, given: tuple[UOp, ...], k: UOp, seed: UOp, counter: UOp, K: int) -> Tensor:
  """A round with drafts x̃ given (prompt lookup) around the target's K+1 rows q: as model_work's."""
  drafts = symbolic_ids(given)
  return flagged(verify(drafts, one_hot(drafts, q.shape[-1]), q, k, random_bits(seed, counter, K + 2)), q)

def one_hot(drafts: Tensor, V: int) -> Tensor:
  """The distributions p (K, V) of a deterministic draft: all the mass on each x̃. Then the test
  r < min(1, q(x̃)/p(x̃)) reads r < q(x̃), and the residual (q - p)+ is q with x̃ removed."""
  return (Tensor.arange(V) == drafts.unsqueeze(-1)).float()

def bound(name: str, top: int) -> UOp:
  return Variable(name, 0, top)

def model_round(target: GPT2, draft: GPT2, K: int, sampling: Sampling) -> Compiled:
  """Algorithm 2's round with a model draft, compiled: Variables (start, j, x_{n-1}, x_n, k, seed, round, n-1)
  with start = n-2 (0 when n = 1) and j = n-1-start; result int32 (K+3,): the round's tokens, a, NaN flag."""
  # the target's position n-1 is a Variable of its own, not start + j: a sum of two Variables gives some of its
  # kernels another layout than its step timed apart, whose position is one Variable
  n_ctx, V = min(target.config.n_ctx, draft.config.n_ctx), target.config.vocab_size
  def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
    def run(start: UOp, j: UOp, before: UOp, last: UOp, k: UOp, seed: UOp, counter: UOp, at: UOp) -> Tensor:
      ids, steps = symbolic_ids((before, last)), lambda fed, pos: forward_rows(draft, fed, pos, sampling, searched)
      # each draft step runs the draft's compiled step of as many rows (compiled.forward_rows): the kernels of c
      return model_work(steps(ids, start), lambda t, x: steps(x, start + j + t),
                        lambda x: score(target, ids[1:].cat(x), at, sampling, searched), j, k, seed, counter, K)
    variables = [bound("start", n_ctx - 2), bound("j", 1), bound("before", V - 1), bound("last", V - 1),
                 bound("k", K), bound("seed", SEED_MAX), bound("round", SEED_MAX), bound("at", n_ctx - 1)]
    return run, variables
  name = f"a round: {draft.config.n_layer}-layer draft, {target.config.n_layer}-layer target, K={K}"
  key = f"round|{signature(target)}|{signature(draft)}|K={K}|{sampling!r}|{SOURCE}"
  return Compiled(name, key, searching(target), build)

def lookup_round(target: GPT2, K: int, sampling: Sampling) -> Compiled:
  """Algorithm 2's round with drafts known on the host (prompt lookup), compiled: Variables (x_n,
  x̃_1..x̃_K, k, seed, round, n-1); result int32 (K+3,) as model_round's."""
  n_ctx, V = target.config.n_ctx, target.config.vocab_size
  def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
    def run(last: UOp, *rest: UOp) -> Tensor:
      *given, k, seed, counter, start = rest
      return lookup_work(score(target, symbolic_ids((last, *given)), start, sampling, searched), given, k, seed,
                         counter, K)
    variables = [bound("last", V - 1), *[bound(f"draft{t}", V - 1) for t in range(K)], bound("k", K),
                 bound("seed", SEED_MAX), bound("round", SEED_MAX), bound("start", n_ctx - 1)]
    return run, variables
  name = f"a lookup round: {target.config.n_layer}-layer target, K={K}"
  return Compiled(name, f"lookup|{signature(target)}|K={K}|{sampling!r}|{SOURCE}", searching(target), build)

def round_work(target: GPT2, draft: GPT2 | None, K: int) -> Compiled:
  """A round's own work alone, compiled (once per target, draft and K), whose time is the cost model's v:
  model_round's call (lookup_round's for draft None) with the models' steps replaced by buffers of their rows,
  realized once, uniform over the vocabulary (verify's `where`s make any finite p and q cost alike): the draws of
  x̃, the tests, the last draw and the NaN flag. Variables (j or x̃_1..x̃_K, k, seed, round)."""
  V, device = target.config.vocab_size, target.wte.weight.device
  def rows(n: int, searched: bool) -> Tensor:  # a compiled step's result for n tokens, padded as its rows are
    uniform = Tensor.full((width(n, searched, device), V), 1.0 / V, device=device)
    return uniform.pad((None, (0, padded_vocab(V) - V))).contiguous().realize()
  def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
    q, tail = rows(K + 1, searched)[:K + 1], [bound("k", K), bound("seed", SEED_MAX), bound("round", SEED_MAX)]
    if draft is None:
      return lambda *v: lookup_work(q, v[:K], *v[K:], K), [*[bound(f"draft{t}", V - 1) for t in range(K)], *tail]
    first, later = rows(2, searched), rows(1, searched)
    return lambda j, *v: model_work(first, lambda t, x: later, lambda x: q, j, *v, K), [bound("j", 1), *tail]
  kind = "prompt lookup" if draft is None else f"{draft.config.n_layer}-layer draft"
  name, key = f"a round's own work: {kind}, K={K}", f"work|{signature(target)}|{kind}|K={K}|{SOURCE}"
  return kept(target, (round_work, draft, K), lambda: Compiled(name, key, searching(target), build))

def token_step(target: GPT2, sampling: Sampling) -> Compiled:
  """Algorithm 1's step, compiled once per target and Sampling: Variables (x_n, seed, round, n-1); result int32
  (2,): x_{n+1} drawn from q(x|x_1, ..., x_n) on the device, and the NaN flag. Its time is t(1), the unit of
  the cost model (costs.py)."""
  n_ctx, V = target.config.n_ctx, target.config.vocab_size
  def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
    def run(last: UOp, seed: UOp, counter: UOp, start: UOp) -> Tensor:
      q = score(target, symbolic_ids((last,)), start, sampling, searched)
      return flagged(draw(q, random_bits(seed, counter, 2).reshape(1, 2)), q)
    variables = [bound("last", V - 1), bound("seed", SEED_MAX), bound("round", SEED_MAX),
                 bound("start", n_ctx - 1)]
    return run, variables
  name, key = f"a token: {target.config.n_layer}-layer target", f"token|{signature(target)}|{sampling!r}|{SOURCE}"
  return kept(target, (token_step, sampling), lambda: Compiled(name, key, searching(target), build))

def run_call(call: Compiled, values: list[int], stats: Stats) -> np.ndarray:
  """Launch one compiled call and read its few numbers; refuse non-finite probabilities (corrupt weights)."""
  start = time.perf_counter()
  out = call(*values)
  launched = time.perf_counter()
  result = call.to_host(out)
  stats.compiled_calls, stats.host_time = stats.compiled_calls + 1, stats.host_time + launched - start
  stats.round_time += time.perf_counter() - start
  if result[-1]:
    raise FloatingPointError("The model produced NaN or infinite probabilities: its weights may be corrupt, "
                             "so fetch them again.")
  return result

# ***** drafts: where x̃ comes from *****

Round = tuple[Compiled, list[int], int]  # a round's compiled call, the values it binds, how many drafts count

class Draft(Protocol):
  """What speculative_sample asks of a draft, the one place where its kind matters: a new kind of draft (a
  layer-skipping draft, an EAGLE-style head) implements these and leaves the loop alone."""
  models: list[GPT2]  # the models it brings (none for prompt lookup): prepared, timed and searched with the target

  def prefill(self, x: list[int], sampling: Sampling, rows: int) -> None:
    """Feed the prompt x into its models' caches, in compiled steps of `rows` rows, before the first round."""

  def round(self, target: GPT2, x: list[int], K: int, k: int, sampling: Sampling) -> Round:
    """This round's compiled call, the values it binds before (seed, round, n-1), and how many drafts count
    (at most k): 0 when it proposes none, and then the call is Algorithm 1's step (token_step)."""

  def parts(self, target: GPT2, x: list[int], K: int, sampling: Sampling) -> list[tuple[Compiled, list[int]]]:
    """The round after x's parts besides the target's step, for session.time_parts, each with the values it binds:
    its steps (the first and a later one; none for prompt lookup), then the round's own work (round_work)."""

  def step_times(self, times: list[float], stats: Stats, K: int) -> tuple[float, float, float]:
    """Seconds of its first draft step, of each later one (c's numerator), and of its share of a round's compiled
    call: from its steps' times (in the order of parts), or measured in the run (stats)."""

  def timing(self, stats: Stats) -> str:
    """How its time per draft token was had, in words, for the command line's report."""

class ModelDraft:
  """A smaller GPT-2 as the draft p: its K steps run inside the round's compiled call (model_round)."""
  def __init__(self, model: GPT2):
    self.model, self.models = model, [model]

  def prefill(self, x: list[int], sampling: Sampling, rows: int) -> None:
    prepare(self.model)  # its caches, before the rounds point at them (once a run, not once a round)
    prefill(self.model, x[:-2], sampling, rows)  # each round feeds it x_{n-1} and x_n: the prompt before them

  def round(self, target: GPT2, x: list[int], K: int, k: int, sampling: Sampling) -> Round:
    n, draft = len(x), self.model
    fed = max(n - 2, 0)  # the draft re-feeds x_{n-1} and x_n from there (x_1 twice when n = 1)
    call = kept(target, (model_round, draft, K, sampling), lambda: model_round(target, draft, K, sampling))
    return call, [fed, n - 1 - fed, x[fed], x[-1], k], k

  def parts(self, target: GPT2, x: list[int], K: int, sampling: Sampling) -> list[tuple[Compiled, list[int]]]:
    """Its first step of 2 rows (x_{n-1}, x_n) and a later one of 1 row, compiled as the round runs them."""
    n, draft = len(x), self.model
    return [(step(draft, 2, sampling), [n - 2, *x[-2:]]), (step(draft, 1, sampling), [n, x[-1]]),
            (round_work(target, draft, K), [n - 1 - max(n - 2, 0), K])]

  def step_times(self, times: list[float], stats: Stats, K: int) -> tuple[float, float, float]:
    first, later = times
    return first, later, first + (K - 1) * later

  def timing(self, stats: Stats) -> str:
    return f"one draft step of 1 row; a round's first, 2 rows: {1e3 * stats.draft_first_time:.2f} ms"

class NgramDraft:
  """Prompt lookup: a draft that is no model.
  It finds the latest earlier occurrence of the context's last n tokens (n from max_n down to 1) in the
  prompt and the text so far, and proposes up to K of the tokens that followed it.

  It is deterministic, so p is one-hot at each x̃ (see one_hot) and Theorem 1 holds as for any draft. Its
  drafts cost a lookup on the host (c ≈ 0), so a round costs about the target's K+1 rows and its own work:
  it pays on text that repeats its input. When nothing matches, the round is one ordinary target step.
  """
  models: list[GPT2] = []

  def __init__(self, max_n: int = 3):
    if max_n < 1:
      raise ValueError(f"The n-gram length is {max_n}: it must be at least 1.")
    self.max_n = max_n

  def propose(self, x: list[int], k: int) -> list[int]:
    """Up to k tokens x̃ that followed the latest earlier match of x's last n tokens."""
    for n in range(min(self.max_n, len(x) - 1), 0, -1):
      for start in range(len(x) - n - 1, -1, -1):  # latest first, and at least one token after the match
        if x[start:start + n] == x[-n:]:
          return x[start + n:start + n + k]
    return []

  def prefill(self, x: list[int], sampling: Sampling, rows: int) -> None:
    pass  # no model: nothing to feed

  def round(self, target: GPT2, x: list[int], K: int, k: int, sampling: Sampling) -> Round:
    drafts = self.propose(x, k)
    if not drafts:  # nothing to propose: one plain target step
      return token_step(target, sampling), [x[-1]], 0
    call = kept(target, (lookup_round, K, sampling), lambda: lookup_round(target, K, sampling))
    return call, [x[-1], *drafts, *[0] * (K - len(drafts)), len(drafts)], len(drafts)

  def parts(self, target: GPT2, x: list[int], K: int, sampling: Sampling) -> list[tuple[Compiled, list[int]]]:
    drafts = self.propose(x, K)  # no steps: its drafts come from the host
    return [(round_work(target, None, K), [*drafts, *[0] * (K - len(drafts)), len(drafts)])]

  def step_times(self, times: list[float], stats: Stats, K: int) -> tuple[float, float, float]:
    """No steps: per draft, its share of the run's host time (the lookups), outside the round's call."""
    return float("nan"), stats.propose_time / max(stats.drafted, 1), 0.0

  def timing(self, stats: Stats) -> str:
    return "prompt lookup, on the host"

def choose_draft(name: str, ngram_max: int, load: Callable[[str], GPT2]) -> Draft:
  """The draft that a command line's --draft names: prompt lookup for "ngram", else ModelDraft(load(name))."""
  return NgramDraft(ngram_max) if name == "ngram" else ModelDraft(load(name))

# ***** whole generations *****

def check_request(K: int, max_new_tokens: int, seed: int, prompt: str | list[int] | None) -> None:
  """Raise ValueError with one sentence for a request that no models could run: the command lines call it
  before any model loads. prompt None: prompts of the caller's own (bench.py's built-in ones)."""
  if not 1 <= K < MAX_ROWS:
    raise ValueError(f"K (the lookahead) is {K}: it must be in 1..{MAX_ROWS - 1}.")
  if max_new_tokens < 1:
    raise ValueError(f"max-new-tokens is {max_new_tokens}: it must be at least 1.")
  if not 0 <= seed <= SEED_MAX:
    raise ValueError(f"The seed is {seed}: it must be in 0..{SEED_MAX}.")
  if prompt is not None and not len(prompt):
    raise ValueError("The prompt is empty: give some text to continue.")

def check_run(models: list[GPT2], prompt_tokens: list[int]) -> None:
  """Raise ValueError with one sentence if the models cannot continue this prompt together."""
  n_ctx, vocab = min(m.config.n_ctx for m in models), models[0].config.vocab_size
  if any(m.config.vocab_size != vocab for m in models):
    raise ValueError(f"The draft's vocabulary ({models[-1].config.vocab_size} tokens) differs from the "
                     f"target's ({vocab}): choose two models that share a tokenizer.")
  if len(prompt_tokens) >= n_ctx:
    raise ValueError(f"The prompt is {len(prompt_tokens)} tokens but the context holds {n_ctx}: "
                     f"shorten it to at most {n_ctx - 1}.")
  if not all(0 <= t < vocab for t in prompt_tokens):
    raise ValueError(f"The prompt has token ids outside the vocabulary of {vocab}.")

def stop_reason(x: list[int], n_prompt: int, max_new_tokens: int, n_ctx: int, eos: int | None) -> str:
  """Why generation must stop now, or "" to go on: the paper's "while n < T", plus end-of-text
  and a full context."""
  if len(x) - n_prompt >= max_new_tokens:
    return "max-new-tokens"
  if len(x) > n_prompt and x[-1] == eos:
    return "end-of-text"
  return "the context" if len(x) >= n_ctx else ""

Stream = Callable[[list[int], list[str]], None]  # called with each batch of new tokens and where each came from

def prefill(model: GPT2, tokens: list[int], sampling: Sampling, rows: int) -> None:
  """Feed a prompt's tokens into model's KV cache, in compiled steps of `rows` rows (their results unread),
  and wait for the device to finish them: the decode is timed from there."""
  if not tokens:
    return
  call = step(model, rows if len(tokens) > 1 else 1, sampling)
  for b in range(0, len(tokens), rows):
    out = call(b, *tokens[b:b + rows])
  Device[out.device].synchronize()

def autoregressive_sample(model: GPT2, prompt_tokens: list[int], max_new_tokens: int, *,
                          sampling: Sampling = Sampling(), seed: int = 0, eos: int | None = EOT,
                          stream: Stream | None = None, rows: int = PREFILL_ROWS) -> tuple[list[int], Stats]:
  """Algorithm 1: sample max_new_tokens tokens from the model one forward pass at a time (with its KV cache),
  each pass and its draw one compiled call on the device.

  Stops early at eos or when the context is full. Returns the new tokens and the Stats. The prompt goes in
  blocks of `rows` tokens (K+1 beside Algorithm 2, to replay its compiled step).
  """
  check_request(1, max_new_tokens, seed, prompt_tokens)
  check_run([model], prompt_tokens)
  stats, start, x = Stats(), time.perf_counter(), list(prompt_tokens)
  prefill(model, x[:-1], sampling, rows)
  call, decode = token_step(model, sampling), time.perf_counter()
  # Algorithm 1: "while n < T do"
  while not (stopped_by := stop_reason(x, len(prompt_tokens), max_new_tokens, model.config.n_ctx, eos)):
    # Algorithm 1: "Sample x_{n+1} ~ q(x|x_1, ..., x_n)" and "n <- n + 1", on the device
    x.append(int(run_call(call, [x[-1], seed, stats.rounds, len(x) - 1], stats)[0]))
    stats.rounds += 1
    if stream:
      stream(x[-1:], ["target"])
  stats.new_tokens, stats.total_time = len(x) - len(prompt_tokens), time.perf_counter() - start
  stats.decode_time, stats.stopped_by = time.perf_counter() - decode, stopped_by
  stats.target_call_time = stats.round_call_time
  return x[len(prompt_tokens):], stats

def speculative_sample(target: GPT2, draft: Draft, prompt_tokens: list[int], max_new_tokens: int, *, K: int = 4,
                       sampling: Sampling = Sampling(), seed: int = 0, eos: int | None = EOT,
                       stream: Stream | None = None) -> tuple[list[int], list[str], Stats]:
  """Algorithm 2: sample max_new_tokens tokens from the target q, drafting K at a time with the draft p:
  ModelDraft(a smaller GPT-2), or NgramDraft (prompt lookup). Each round is one compiled call on the device.

  The tokens follow the target's distribution exactly (the paper's Theorem 1). Stops early at eos or when the
  context is full. Returns the new tokens, where each came from ('accepted', 'resampled' from (q - p)+,
  'bonus', or 'target' for a plain target step where the draft proposed nothing), and the Stats.
  """
  check_request(K, max_new_tokens, seed, prompt_tokens)
  check_run([target, *draft.models], prompt_tokens)
  stats, start = Stats(), time.perf_counter()
  n_ctx, n_prompt = min(m.config.n_ctx for m in [target, *draft.models]), len(prompt_tokens)
  # Algorithm 2: "Initialise n ← t." (the prompt x_1, ..., x_t; n is len(x) throughout)
  x, origins = list(prompt_tokens), []
  # every round feeds the target from x_n (cache position n-1), a model draft from x_{n-1}: the prompt
  # before those goes into their caches first, in steps of K+1 rows
  prefill(target, x[:-1], sampling, K + 1)
  draft.prefill(x, sampling, K + 1)
  decode = time.perf_counter()
  # Algorithm 2: "while n < T do"
  while not (stopped_by := stop_reason(x, n_prompt, max_new_tokens, n_ctx, eos)):
    n = len(x)
    chose = time.perf_counter()
    # near the end of the context, fewer drafts count: the target's K+1 positions still fit in its cache's
    # spare rows
    call, values, k = draft.round(target, x, K, min(K, n_ctx - n), sampling)
    stats.propose_time += time.perf_counter() - chose
    out = run_call(call, [*values, seed, stats.rounds, n - 1], stats)
    stats.rounds += 1
    a = int(out[K + 1]) if k else 0  # k = 0: the call was a plain target step, whose token is out[0]
    new = [int(t) for t in out[:a + 1]]
    came_from = ["accepted"] * a + ["resampled" if a < k else "bonus" if k else "target"]
    stats.drafted, stats.accepted = stats.drafted + k, stats.accepted + a
    stats.rejected, stats.plain_rounds = stats.rejected + (a < k), stats.plain_rounds + (not k)
    # Never overshoot: stop at max_new_tokens, at the end of the context,
    # and at eos even inside an accepted run.
    new = new[:min(max_new_tokens - (n - n_prompt), n_ctx - n)]
    if eos in new:
      new = new[:new.index(eos) + 1]
    x += new
    origins += came_from[:len(new)]
    if stream:
      stream(new, came_from[:len(new)])
  stats.new_tokens, stats.total_time = len(x) - n_prompt, time.perf_counter() - start
  stats.decode_time, stats.stopped_by = time.perf_counter() - decode, stopped_by
  return x[n_prompt:], origins, stats

if __name__ == "__main__":
  import sys
  from cli import command  # the command line has its own module, so that this one holds only the algorithms
  sys.exit(command())
