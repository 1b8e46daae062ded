"""Speculative sampling with GPT-2 in tinygrad: Algorithm 2 of Chen et al. (2023),
and Algorithm 1 as the baseline.

    python speculative.py --prompt "Alan Turing theorized that computers would one day become"   # see cli.py

Notation as in the paper: q is the target model (GPT-2 1.5B by default), p the draft model (GPT-2 124M),
K the lookahead, x̃ a draft token. Leviathan et al. (2022) swap the letters: their p is the target.
Positions: the paper counts tokens from 1 (x_1 .. x_n); the code's lists and KV-cache positions count from 0,
so the paper's x_n is x[n - 1] and sits at cache position n - 1.

Where the work runs: each model call, with the logits-to-probabilities step (sampling.Sampling), is one
compiled call on tinygrad's device (Metal, CUDA or the CPU), whose probability vectors are copied to the host
once. The draws and the K accept/reject decisions are taken there in float64 NumPy with one seeded generator.

What "exact" means here: the tokens follow the target's distribution q exactly as the device computes it, in
float32 (each row sums to 1 within float32 rounding, about 1e-6). Algorithm 2 adds no error of its own:
every draw and every test r < q/p is made in float64 on those same float32 numbers, so its output has the
law that Algorithm 1 would sample from those same q (Theorem 1).
A float16 model computes another q, close to the float32 one.
"""
from __future__ import annotations
import time
from dataclasses import dataclass
from typing import Callable
import numpy as np
from gpt2 import BLOCK, GPT2, MAX_ROWS
from sampling import Sampling, sample

EOT = 50256  # GPT-2's <|endoftext|>

def next_probs(model: GPT2, tokens: list[int], start_pos: int, n_out: int, sampling: Sampling,
               rows: int = BLOCK) -> np.ndarray:
  """Feed tokens at start_pos .. into model (writing its KV cache), in compiled steps of `rows` rows; the
  (n_out, V) distributions after the last n_out of them, in float64 on the host."""
  probs = model(tokens, start_pos, last=n_out, head=sampling, rows=rows).astype(np.float64)
  # a NaN would make every draw meaningless (tinygrad's own multinomial silently returns token 0):
  # refuse it here
  if not np.isfinite(probs).all():
    raise FloatingPointError("The model produced NaN or infinite probabilities: its weights may be corrupt, "
                             "so fetch them again.")
  return probs

# ***** the math of one step, on probability vectors (on the host) *****

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

# ***** drafts: where x̃ and p come from *****

class ModelDraft:
  """The paper's draft: a smaller model p, sampled auto-regressively, one call per draft token,
  with its KV cache. Its calls of several tokens (the prompt, a catch-up) run in blocks of `rows`."""
  def __init__(self, model: GPT2, rows: int = BLOCK):
    self.model, self.rows = model, rows
    self.cached = 0  # how many leading tokens of x the draft's KV cache holds; the rest is stale

  def propose(self, x: list[int], k: int, sampling: Sampling,
              rng: np.random.Generator) -> tuple[list[int], np.ndarray]:
    """k draft tokens x̃ to follow x, and the distributions p (k, V) they were drawn from."""
    # Algorithm 2: "for t = 1 : K do:
    #               Sample draft auto-regressively x̃_t ~ p(x|x_1, ..., x_n, x̃_1, ..., x̃_{t-1})"
    # The draft first catches up on the tokens its cache lacks: the prompt, the token emitted last round, and
    # after an all-accept round also x̃_K, which it drafted but never fed.
    drafts, p, feed = [], [], x[self.cached:]
    for _ in range(k):
      p.append(next_probs(self.model, feed, self.cached, 1, sampling, self.rows)[0])
      self.cached += len(feed)
      drafts.append(sample(p[-1], rng))
      feed = drafts[-1:]
    return drafts, np.stack(p)

  def keep(self, n: int) -> None:
    """Roll back to the first n tokens of x: cache entries past them are stale, overwritten before
    they are read."""
    self.cached = min(self.cached, n)

class NgramDraft:
  """Prompt lookup: a draft that is no model.
  It finds the latest earlier occurrence of the context's last n tokens (n from max_n down to 1) in the
  prompt and the text so far, and proposes up to K of the tokens that followed it.

  It is deterministic, so p is one-hot at each x̃ (see one_hot) and Theorem 1 holds as for any draft. Its
  drafts cost next to nothing (c ≈ 0), so the speedup is the tokens per target call itself: large on text that
  repeats its input. When nothing matches it proposes nothing, and the round is one ordinary target step.
  """
  def __init__(self, max_n: int = 3):
    if max_n < 1:
      raise ValueError(f"The n-gram length is {max_n}: it must be at least 1.")
    self.max_n = max_n

  def propose(self, x: list[int], k: int, sampling: Sampling,
              rng: np.random.Generator) -> tuple[list[int], None]:
    """Up to k tokens x̃ that followed the latest earlier match of x's last n tokens;
    p None: one-hot at each x̃."""
    for n in range(min(self.max_n, len(x) - 1), 0, -1):
      for start in range(len(x) - n - 1, -1, -1):  # latest first, and at least one token after the match
        if x[start:start + n] == x[-n:]:
          return x[start + n:start + n + k], None
    return [], None

  def keep(self, n: int) -> None:
    """Nothing to roll back: the draft holds no state."""

Draft = ModelDraft | NgramDraft

# ***** what a run measures, and what the paper predicts from it *****

@dataclass
class Stats:
  new_tokens: int = 0
  target_calls: int = 0
  drafted: int = 0          # draft tokens proposed
  accepted: int = 0         # drafts that passed r < q(x̃)/p(x̃)
  rejected: int = 0         # drafts that failed it: each ends its round, so the drafts after it
                            # are never checked
  target_time: float = 0.0  # seconds in the target's calls (including the copy of q to the host)
  draft_time: float = 0.0   # seconds spent drafting: the draft model's calls, or an n-gram lookup
  total_time: float = 0.0
  stopped_by: str = ""      # "max-new-tokens", "end-of-text" or "the context": what ended the run

  @property
  def acceptance_rate(self) -> float:
    """α̂ = accepted / checked drafts, the estimate of the paper's α (the chance that one draft is accepted).

    Every check that verify made counts, also in a last round whose tokens max-new-tokens or end-of-text then
    cut: each check is a fair draw of "is x̃ accepted?", and dropping those of the cut tokens, which are
    mostly accepted ones, would bias α̂ low. Drafts after a rejection are never checked, so they never count.
    """
    return self.accepted / max(self.accepted + self.rejected, 1)

  @property
  def tokens_per_target_call(self) -> float:
    return self.new_tokens / max(self.target_calls, 1)

  @property
  def mean_drafted(self) -> float:
    """Drafts proposed per round: K for a model draft (fewer only at the context's end),
    up to K for an n-gram draft."""
    return self.drafted / max(self.target_calls, 1)

  @property
  def draft_call_time(self) -> float:
    """Seconds to draft one token: one call of a draft model; a share of a lookup for the n-gram draft."""
    return self.draft_time / max(self.drafted, 1)

  @property
  def target_call_time(self) -> float:
    return self.target_time / max(self.target_calls, 1)

  @property
  def cost_ratio(self) -> float:
    """c, the paper's cost of drafting one token over a target call (≈ 0 for a draft that is no model)."""
    return self.draft_call_time / self.target_call_time

  @property
  def tokens_per_second(self) -> float:
    return self.new_tokens / self.total_time

def expected_tokens_per_loop(alpha: float, K: float) -> float:
  """The paper's expected tokens per target call, (1 - α^(K+1)) / (1 - α). For a draft that proposes a varying
  number, K is the mean proposed: an approximation, as the formula is not linear in K."""
  return K + 1.0 if alpha >= 1 else (1 - alpha ** (K + 1)) / (1 - alpha)

def predicted_speedup(alpha: float, K: float, c: float) -> float:
  """Expected speedup over Algorithm 1: (1 - α^(K+1)) / ((1 - α)(Kc + 1))."""
  return expected_tokens_per_loop(alpha, K) / (K * c + 1)

# ***** whole generations *****

def check_run(models: list[GPT2], prompt_tokens: list[int], max_new_tokens: int) -> None:
  """Raise ValueError with one sentence if the models cannot continue this prompt together."""
  n_ctx, vocab = min(m.config.n_ctx for m in models), models[0].config.vocab_size
  if any(m.config.vocab_size != vocab for m in models):
    raise ValueError(f"The draft's vocabulary ({models[-1].config.vocab_size} tokens) differs from the "
                     f"target's ({vocab}): choose two models that share a tokenizer.")
  if not prompt_tokens:
    raise ValueError("The prompt is empty: give some text to continue.")
  if len(prompt_tokens) >= n_ctx:
    raise ValueError(f"The prompt is {len(prompt_tokens)} tokens but the context holds {n_ctx}: "
                     f"shorten it to at most {n_ctx - 1}.")
  if not all(0 <= t < vocab for t in prompt_tokens):
    raise ValueError(f"The prompt has token ids outside the vocabulary of {vocab}.")
  if max_new_tokens < 1:
    raise ValueError(f"max-new-tokens is {max_new_tokens}: it must be at least 1.")

def stop_reason(x: list[int], n_prompt: int, max_new_tokens: int, n_ctx: int, eos: int | None) -> str:
  """Why generation must stop now, or "" to go on: the paper's "while n < T", plus end-of-text
  and a full context."""
  if len(x) - n_prompt >= max_new_tokens:
    return "max-new-tokens"
  if len(x) > n_prompt and x[-1] == eos:
    return "end-of-text"
  return "the context" if len(x) >= n_ctx else ""

def timed(fn: Callable, *args) -> tuple[np.ndarray, float]:
  start = time.perf_counter()
  return fn(*args), time.perf_counter() - start

Stream = Callable[[list[int], list[str]], None]  # called with each batch of new tokens and where
                                                 # each came from

def autoregressive_sample(model: GPT2, prompt_tokens: list[int], max_new_tokens: int, *,
                          temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                          eos: int | None = EOT, stream: Stream | None = None,
                          rows: int = BLOCK) -> tuple[list[int], Stats]:
  """Algorithm 1: sample max_new_tokens tokens from the model one forward pass at a time (with its KV cache).

  Stops early at eos or when the context is full. Returns the new tokens and the Stats. The prompt goes in
  blocks of `rows` tokens (K+1 beside Algorithm 2, to replay its compiled step).
  """
  sampling = Sampling(temperature, top_k, top_p)
  check_run([model], prompt_tokens, max_new_tokens)
  rng, stats, start = np.random.default_rng(seed), Stats(), time.perf_counter()
  x, cached = list(prompt_tokens), 0  # cached: how many leading tokens of x the KV cache holds
  # Algorithm 1: "while n < T do"
  while not (stopped_by := stop_reason(x, len(prompt_tokens), max_new_tokens, model.config.n_ctx, eos)):
    # Algorithm 1: "Sample x_{n+1} ~ q(x|x_1, ..., x_n)" and "n <- n + 1"
    q, dt = timed(next_probs, model, x[cached:], cached, 1, sampling, rows)
    stats.target_calls, stats.target_time, cached = stats.target_calls + 1, stats.target_time + dt, len(x)
    x.append(sample(q[0], rng))
    if stream:
      stream(x[-1:], ["target"])
  stats.new_tokens, stats.total_time = len(x) - len(prompt_tokens), time.perf_counter() - start
  stats.stopped_by = stopped_by
  return x[len(prompt_tokens):], stats

def speculative_sample(target: GPT2, draft: GPT2 | Draft, prompt_tokens: list[int], max_new_tokens: int,
                       *, K: int = 4, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                       seed: int = 0, eos: int | None = EOT,
                       stream: Stream | None = None) -> tuple[list[int], list[str], Stats]:
  """Algorithm 2: sample max_new_tokens tokens from the target q, drafting K at a time with the draft p: a
  smaller GPT-2, or any draft object such as NgramDraft.

  The tokens follow the target's distribution exactly (the paper's Theorem 1). Stops early at eos or when the
  context is full. Returns the new tokens, where each came from (see verify), and the Stats.
  """
  sampling = Sampling(temperature, top_k, top_p)
  if not 1 <= K < MAX_ROWS:
    raise ValueError(f"K (the lookahead) is {K}: it must be in 1..{MAX_ROWS - 1}.")
  # every call of several tokens runs in steps of K+1 rows: the target's rounds, a prompt, a draft's catch-up
  draft = ModelDraft(draft, K + 1) if isinstance(draft, GPT2) else draft
  models = [target] + ([draft.model] if isinstance(draft, ModelDraft) else [])
  check_run(models, prompt_tokens, max_new_tokens)
  rng, stats, start = np.random.default_rng(seed), Stats(), time.perf_counter()
  n_ctx, n_prompt = min(m.config.n_ctx for m in models), len(prompt_tokens)
  x, origins = list(prompt_tokens), []
  target_cached = 0  # how many leading tokens of x the target's KV cache holds; the rest is stale
  # Algorithm 2: "while n < T do"
  while not (stopped_by := stop_reason(x, n_prompt, max_new_tokens, n_ctx, eos)):
    n, k = len(x), min(K, n_ctx - len(x))  # near the end of the context, draft fewer so the target's
                                           # K+1 positions fit
    # Algorithm 2: "for t = 1 : K do:
    #               Sample draft auto-regressively x̃_t ~ p(x|x_1, ..., x_n, x̃_1, ..., x̃_{t-1})"
    (drafts, p), dt = timed(draft.propose, x, k, sampling, rng)
    stats.drafted, stats.draft_time = stats.drafted + len(drafts), stats.draft_time + dt
    # Algorithm 2: "In parallel, compute K + 1 sets of logits from drafts x̃_1, ..., x̃_K:
    #          q(x|x_1, ..., x_n), q(x|x_1, ..., x_n, x̃_1), ..., q(x|x_1, ..., x_n, x̃_1, ..., x̃_K)"
    # One call on [x_n, x̃_1, ..., x̃_K] from cache position n-1 (plus whatever the target's cache lacks).
    q, dt = timed(next_probs, target, x[target_cached:] + drafts, target_cached, len(drafts) + 1, sampling,
                  K + 1)
    stats.target_calls, stats.target_time = stats.target_calls + 1, stats.target_time + dt
    # Algorithm 2: "for t = 1 : K do" accept or reject each draft, then the bonus token (see verify)
    new, came_from = verify(drafts, one_hot(drafts, q.shape[1]) if p is None else p, q, rng)
    stats.accepted += len(new) - 1
    stats.rejected += came_from[-1] == "resampled"
    # Roll back: both caches keep x_1..x_n and the accepted drafts;
    # what they hold past that is overwritten next round.
    target_cached = n + len(new) - 1
    draft.keep(n + len(new) - 1)
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
  stats.stopped_by = stopped_by
  return x[n_prompt:], origins, stats

if __name__ == "__main__":
  import sys
  from cli import main  # the command line has its own module, so that this one holds only the algorithms
  sys.exit(main())
