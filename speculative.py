"""The lesson's heart: speculative sampling with GPT-2 in tinygrad, Algorithm 2 of Chen et al. (2023), and
Algorithm 1 as the baseline.

    python speculative.py --prompt "Alan Turing theorized that computers would one day become"   # tools/cli.py

Notation as in the paper: q is the target model (GPT-2 1.5B by default), p the draft model (GPT-2 124M),
K the lookahead, x̃ a draft token. Leviathan et al. (2022) swap the letters: their p is the target.
Positions: the paper counts tokens from 1 (x_1 .. x_n); the code's lists and KV-cache positions count from 0,
so the paper's x_n is x[n - 1] and sits at cache position n - 1.

Where the work runs: all of Algorithm 2 runs on tinygrad's device (Metal, CUDA or the CPU), as Tensor code
compiled once: a round (the draft's K steps, the target's K+1 rows, the K accept/reject tests, the residual or
bonus draw) is one compiled call, and the host reads back a few numbers: the emitted tokens, how many drafts
were accepted, and a flag for non-finite probabilities. Algorithm 1 is one compiled call per token, with its
draw on the device too. reference.py holds the same round in float64 NumPy, to read and to walk by hand.

What "exact" means here: the tokens follow the target's distribution q as the device computes it, within the
float32 bounds that sampling.py states beside its draw. The random bits come from tinygrad's threefry generator
keyed by (seed, round), so the same seed gives the same tokens on the same device, run after run.
"""
from __future__ import annotations
import sys, time
from typing import Callable, Protocol
import numpy as np
from tinygrad import Tensor, UOp, Variable, dtypes
from costs import Stats
from gpt2 import GPT2
from sampling import NOT_FINITE, Sampling, draw, random_bits, uniform
from engine.compiled import PREFILL_ROWS, Compiled, beam_of, cached_call, flagged, forward_rows, prepare, signature
from engine.compiled import prefill, step, symbolic_ids
from engine.layout import MAX_ROWS

EOT = 50256  # GPT-2's <|endoftext|>
SEED_MAX = 2**31 - 1  # seeds and round counters enter compiled calls as Variables of this range

# ***** Algorithm 2's lines, as Tensor code *****

def row(x: Tensor, i: Tensor) -> Tensor:
  """Row i[...] of x (..., R, V): (..., V). A masked sum, so a NaN in another row stays out."""
  mask = Tensor.arange(x.shape[-2]) == i.unsqueeze(-1)
  return mask.unsqueeze(-1).where(x, 0).sum(-2)

def sample_draft(p_t: Tensor, bits: Tensor) -> Tensor:
  """Algorithm 2: "Sample draft auto-regressively x̃_t ~ p(x|x_1, ..., x_n, x̃_1, ..., x̃_{t-1})"."""
  return draw(p_t, bits)

def score(target: GPT2, ids: Tensor, start_pos: UOp, forward: Forward, searched: bool) -> Tensor:
  """Algorithm 2: "In parallel, compute K + 1 sets of logits from drafts x̃_1, ..., x̃_K:
  q(x|x_1, ..., x_n), q(x|x_1, ..., x_n, x̃_1), ..., q(x|x_1, ..., x_n, x̃_1, ..., x̃_K)":
  one pass of the target on [x_n, x̃_1, ..., x̃_K] from cache position n-1, under the draft's Sampling."""
  # the target's compiled step of K+1 rows, padding included: the kernels that s is timed on; the padding rows
  # are dropped after they are realized
  return forward(target, ids, start_pos, searched)[:ids.shape[0]]

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

# A model's distributions (rows, V) after each of the token ids fed from a cache position, its kernels searched or
# not: its compiled step under the round's Sampling (compiled.forward_rows), which a measurement may replace
Forward = Callable[[GPT2, Tensor, UOp, bool], Tensor]

def compiled_steps(sampling: Sampling) -> Forward:
  """The models' compiled steps under sampling: what a round runs, and what c and s are timed on alone."""
  return lambda model, ids, start_pos, searched: forward_rows(model, ids, start_pos, sampling, searched)

def model_round(target: GPT2, draft: GPT2, K: int, sampling: Sampling, forward: Forward | None = None) -> Compiled:
  """Algorithm 2's round with a model draft, compiled: Variables (start, j, x_{n-1}, x_n, k, seed, round, n-1)
  with start = n-2 (0 when n = 1) and j = n-1-start; result int32 (K+3,): the round's tokens, a, the NaN flag.
  forward: the models' distributions (their compiled steps under sampling unless given)."""
  # the target's position n-1 is a Variable of its own, not start + j: a sum of two Variables gives some of its
  # kernels another layout than its step timed apart, whose position is one Variable
  n_ctx, V = min(target.config.n_ctx, draft.config.n_ctx), target.config.vocab_size
  rows_of = forward or compiled_steps(sampling)
  def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
    def run(start: UOp, j: UOp, before: UOp, last: UOp, k: UOp, seed: UOp, counter: UOp, at: UOp) -> Tensor:
      ids, bits = symbolic_ids((before, last)), random_bits(seed, counter, 3 * K + 2).realize()  # realized once
      drafts, p, row_j = [], [], Tensor.full((1,), j, dtype=dtypes.int32)
      # Algorithm 2: "for t = 1 : K do"
      for t in range(K):
        # "Sample draft auto-regressively x̃_t ~ p(x|x_1, ..., x_n, x̃_1, ..., x̃_{t-1})": the draft's step on
        # x_{n-1} and x_n first, whose row j is x_n's (the draft may lack both: after a round that accepted every
        # draft it never fed x̃_K), then on x̃_{t-1}
        fed, at_pos = (ids, start) if t == 0 else (drafts[-1], start + j + t)
        p.append(rows_of(draft, fed, at_pos, searched)[row_j])
        drafts.append(sample_draft(p[-1], bits[K + 2 + 2 * t:K + 4 + 2 * t].reshape(1, 2)))
        # realized step by step inside the compiled call: the same kernels, but scheduled as K small graphs, which
        # tinygrad compiles several times faster than one graph of K steps
        Tensor.realize(p[-1], drafts[-1])
        row_j = Tensor.zeros(1, dtype=dtypes.int32)
      drafts, p = Tensor.cat(*drafts), Tensor.cat(*p)
      q = score(target, ids[1:].cat(drafts), at, rows_of, searched).realize()
      return flagged(verify(drafts, p, q, k, bits[:K + 2]), p, q)
    return run, [Variable("start", 0, n_ctx - 2), Variable("j", 0, 1), Variable("before", 0, V - 1),
                 Variable("last", 0, V - 1), Variable("k", 0, K), Variable("seed", 0, SEED_MAX),
                 Variable("round", 0, SEED_MAX), Variable("at", 0, n_ctx - 1)]
  given = forward_key(sampling, forward)
  name = f"a round: {draft.config.n_layer}-layer draft, {target.config.n_layer}-layer target, K={K}"
  name += "" if forward is None else f", {given}"
  return Compiled(name, f"round|{signature(target)}|{signature(draft)}|K={K}|{given}", beam_of(target), build)

def lookup_round(target: GPT2, K: int, sampling: Sampling, forward: Forward | None = None) -> Compiled:
  """Algorithm 2's round with drafts known on the host (prompt lookup), compiled: Variables (x_n, x̃_1..x̃_K, k,
  seed, round, n-1); result int32 (K+3,) as model_round's."""
  n_ctx, V = target.config.n_ctx, target.config.vocab_size
  rows_of = forward or compiled_steps(sampling)
  def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
    def run(last: UOp, *rest: UOp) -> Tensor:
      *given, k, seed, counter, start = rest
      drafts = symbolic_ids(given)
      q = score(target, symbolic_ids((last, *given)), start, rows_of, searched)
      return flagged(verify(drafts, one_hot(drafts, q.shape[-1]), q, k, random_bits(seed, counter, K + 2)), q)
    return run, [Variable("last", 0, V - 1), *[Variable(f"draft{t}", 0, V - 1) for t in range(K)],
                 Variable("k", 0, K), Variable("seed", 0, SEED_MAX), Variable("round", 0, SEED_MAX),
                 Variable("start", 0, n_ctx - 1)]
  given = forward_key(sampling, forward)
  name = f"a lookup round: {target.config.n_layer}-layer target, K={K}" + ("" if forward is None else f", {given}")
  return Compiled(name, f"lookup|{signature(target)}|K={K}|{given}", beam_of(target), build)

def forward_key(sampling: Sampling, forward: Forward | None) -> str:
  """What a round's kernels depend on in its forward, for its key (compiled and cached) and name: the Sampling of
  its models' steps, or the name of the forward given instead, which leaves the Sampling unused."""
  return repr(sampling) if forward is None else f"{forward.__qualname__} for the models' steps"

def one_hot(drafts: Tensor, V: int) -> Tensor:
  """The distributions p (K, V) of a deterministic draft: all the mass on each x̃. Then the test
  r < min(1, q(x̃)/p(x̃)) reads r < q(x̃), and the residual (q - p)+ is q with x̃ removed."""
  return (Tensor.arange(V) == drafts.unsqueeze(-1)).float()

def token_step(target: GPT2, sampling: Sampling) -> Compiled:
  """Algorithm 1's step, compiled once per target and Sampling: Variables (x_n, seed, round, n-1); result int32
  (2,): x_{n+1} drawn from q(x|x_1, ..., x_n) on the device, and the NaN flag. Its time is t(1), the unit of
  the cost model (costs.py)."""
  n_ctx, V = target.config.n_ctx, target.config.vocab_size
  def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
    def run(last: UOp, seed: UOp, counter: UOp, start: UOp) -> Tensor:
      q = score(target, symbolic_ids((last,)), start, compiled_steps(sampling), searched)
      return flagged(draw(q, random_bits(seed, counter, 2).reshape(1, 2)), q)
    return run, [Variable("last", 0, V - 1), Variable("seed", 0, SEED_MAX), Variable("round", 0, SEED_MAX),
                 Variable("start", 0, n_ctx - 1)]
  name, key = f"a token: {target.config.n_layer}-layer target", f"token|{signature(target)}|{sampling!r}"
  return cached_call(target, (token_step, sampling), lambda: Compiled(name, key, beam_of(target), build))

def run_call(call: Compiled, values: list[int], stats: Stats) -> np.ndarray:
  """Launch one compiled call and read its few numbers; refuse non-finite probabilities (corrupt weights)."""
  start = time.perf_counter()
  out = call(*values)
  launched = time.perf_counter()
  result = call.to_host(out)
  stats.compiled_calls, stats.host_time = stats.compiled_calls + 1, stats.host_time + launched - start
  stats.round_time += time.perf_counter() - start
  if result[-1]:
    raise FloatingPointError(NOT_FINITE)
  return result

# ***** drafts: where x̃ comes from *****

Round = tuple[Compiled, list[int], int]  # a round's compiled call, the values it binds, how many drafts count
Part = tuple[Compiled, list[int]]  # a compiled call and the values it binds

class Draft(Protocol):
  """What speculative_sample asks of a draft, the one place where its kind matters: a new kind of draft (a
  layer-skipping draft, an EAGLE-style head) implements these and leaves the loop and the tools alone."""
  models: list[GPT2]  # the models it brings (none for prompt lookup): prepared, timed and searched with the target

  def prefill(self, x: list[int], sampling: Sampling, rows: int) -> None:
    """Feed the prompt x into its models' caches, in compiled steps of `rows` rows, before the first round."""

  def round(self, target: GPT2, x: list[int], K: int, k: int, sampling: Sampling,
            forward: Forward | None = None) -> Round:
    """This round's compiled call, the values it binds before (seed, round, n-1), and how many drafts count (at
    most k): 0 when it proposes none, and then the call is Algorithm 1's step. forward: as model_round's."""

  def steps(self, x: list[int], sampling: Sampling) -> dict[str, Part]:
    """Its model's steps in a round after x, as the round runs them, by name, for a measurement to time alone:
    "first" (x_{n-1} and x_n, 2 rows) and "later" (1 row); none for a draft that runs no model."""

class ModelDraft:
  """A smaller GPT-2 as the draft p: its K steps run inside the round's compiled call (model_round)."""
  def __init__(self, model: GPT2):
    self.model, self.models = model, [model]

  def prefill(self, x: list[int], sampling: Sampling, rows: int) -> None:
    prepare(self.model)  # its caches, before the rounds point at them (once a run, not once a round)
    prefill(self.model, x[:-2], sampling, rows)  # each round feeds it x_{n-1} and x_n: the prompt before them

  def round(self, target: GPT2, x: list[int], K: int, k: int, sampling: Sampling,
            forward: Forward | None = None) -> Round:
    n, draft = len(x), self.model
    fed = max(n - 2, 0)  # the draft re-feeds x_{n-1} and x_n from there (x_1 twice when n = 1)
    call = cached_call(target, (model_round, draft, K, forward_key(sampling, forward)),
                       lambda: model_round(target, draft, K, sampling, forward))
    return call, [fed, n - 1 - fed, x[fed], x[-1], k], k

  def steps(self, x: list[int], sampling: Sampling) -> dict[str, Part]:
    n, draft = len(x), self.model
    return {"first": (step(draft, 2, sampling), [n - 2, *x[-2:]]), "later": (step(draft, 1, sampling), [n, x[-1]])}

class NgramDraft:
  """Prompt lookup: a draft that is no model.
  It finds the latest earlier occurrence of the context's last n tokens (n from max_n down to 1) in the
  prompt and the text so far, and proposes up to K of the tokens that followed it.

  It is deterministic, so p is one-hot at each x̃ (see one_hot) and Theorem 1 holds as for any draft. It pays on
  text that repeats its input. When nothing matches, the round is one ordinary target step.
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

  def round(self, target: GPT2, x: list[int], K: int, k: int, sampling: Sampling,
            forward: Forward | None = None) -> Round:
    drafts = self.propose(x, k)
    if not drafts:  # nothing to propose: one plain target step
      return token_step(target, sampling), [x[-1]], 0
    call = cached_call(target, (lookup_round, K, forward_key(sampling, forward)),
                       lambda: lookup_round(target, K, sampling, forward))
    return call, [x[-1], *drafts, *[0] * (K - len(drafts)), len(drafts)], len(drafts)

  def steps(self, x: list[int], sampling: Sampling) -> dict[str, Part]:
    return {}  # its drafts come from the host

# ***** whole generations *****

def check_request(K: int, max_new_tokens: int, seed: int, prompt: str | list[int] | None) -> None:
  """Raise ValueError with one sentence for a request that no models could run: the command lines call it
  before any model loads. prompt None: prompts of the caller's own (tools/bench.py's built-in ones)."""
  if not 1 <= K < MAX_ROWS:
    raise ValueError(f"K (the lookahead) is {K}: it must be in 1..{MAX_ROWS - 1}.")
  if max_new_tokens < 1:
    raise ValueError(f"max-new-tokens is {max_new_tokens}: it must be at least 1.")
  if not 0 <= seed <= SEED_MAX:
    raise ValueError(f"The seed is {seed}: it must be in 0..{SEED_MAX}.")
  if prompt is not None and not len(prompt):
    raise ValueError("The prompt is empty: give some text to continue.")

def check_models(models: list[GPT2], prompt_tokens: list[int]) -> None:
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

def autoregressive_sample(model: GPT2, prompt_tokens: list[int], max_new_tokens: int, *,
                          sampling: Sampling = Sampling(), seed: int = 0, eos: int | None = EOT,
                          stream: Stream | None = None, rows: int = PREFILL_ROWS) -> tuple[list[int], Stats]:
  """Algorithm 1: sample max_new_tokens tokens from the model one forward pass at a time (with its KV cache),
  each pass and its draw one compiled call on the device.

  Stops early at eos or when the context is full. Returns the new tokens and the Stats. The prompt goes in
  blocks of `rows` tokens (K+1 beside Algorithm 2, to replay its compiled step).
  """
  check_request(1, max_new_tokens, seed, prompt_tokens)
  check_models([model], prompt_tokens)
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
  check_models([target, *draft.models], prompt_tokens)
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
  # the command line lives in tools/cli.py, which imports this file as the module `speculative`: the same module,
  # not a second copy of it
  sys.modules["speculative"] = sys.modules[__name__]
  from tools.cli import command
  sys.exit(command())
