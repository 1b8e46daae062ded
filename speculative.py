"""Speculative sampling with GPT-2 in tinygrad: Algorithm 2 of Chen et al. (2023), and Algorithm 1 as the baseline.

    python speculative.py --prompt "Alan Turing theorized that computers would one day become"

Notation as in the paper: q is the target model (GPT-2 1.5B by default), p the draft model (GPT-2 124M),
K the lookahead, x̃ a draft token. Leviathan et al. (2022) swap the letters: their p is the target.

Where the work runs: both models and the logits-to-probabilities step run on tinygrad's device (Metal, CUDA or
the CPU). Each forward pass copies its probability vectors to the host once; the draws and the K accept/reject
decisions are taken there in float64 NumPy with one seeded generator: exact, reproducible, and cheap next to a
forward pass.
"""
from __future__ import annotations
import argparse, codecs, functools, sys, time
from dataclasses import dataclass
from typing import Callable
import numpy as np
from tinygrad import Device, Tensor, dtypes
from tinygrad.helpers import DEV
from gpt2 import GPT2, jit_by_length
from weights import LoadError, load_model, load_tokenizer

EOT = 50256  # GPT-2's <|endoftext|>

# ***** logits -> sampling distributions (on the device) *****

def to_probs(logits: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
  """Sampling distributions (..., V) from logits: temperature, then top-k, then top-p. Temperature 0 is a one-hot argmax.

  Applied alike to the draft and the target at every position, so Algorithm 2 compares like with like.
  """
  if temperature == 0: return logits.argmax(-1).one_hot(logits.shape[-1]).float()
  logits = logits / temperature
  if top_k: logits = (logits < logits.topk(top_k)[0][..., -1:]).where(float("-inf"), logits)  # ties with the k-th are kept
  probs = logits.softmax(-1)
  if top_p < 1:
    # keep the most probable tokens until their mass reaches top_p: a token is kept if the mass strictly above it is < top_p
    s = probs.sort(-1, descending=True)[0]
    cutoff = ((s.cumsum(-1) - s) < top_p).where(s, 1.0).min(-1, keepdim=True)
    probs = (probs >= cutoff).where(probs, 0.0)
    probs = probs / probs.sum(-1, keepdim=True)
  return probs

@functools.cache
def _probs_fn(model: GPT2, n_out: int, temperature: float, top_k: int, top_p: float) -> Callable[[Tensor, int], Tensor]:
  """One forward pass plus to_probs for the last n_out positions, JIT-compiled per input length."""
  return jit_by_length(lambda tokens, start_pos: to_probs(model.forward(tokens, start_pos)[0, -n_out:], temperature, top_k, top_p),
                       model.config.n_ctx)

def next_probs(model: GPT2, tokens: list[int], start_pos: int, n_out: int, settings: tuple[float, int, float]) -> np.ndarray:
  """Feed tokens at start_pos .. into model (writing its KV cache); the (n_out, V) distributions after the last n_out of them."""
  probs = _probs_fn(model, n_out, *settings)(Tensor([tokens], dtype=dtypes.int32), start_pos).numpy().astype(np.float64)
  # tinygrad's own multinomial would silently return token 0 on NaN: refuse them here, before any draw
  if not np.isfinite(probs).all(): raise FloatingPointError("The model produced NaN or infinite probabilities: its weights may be corrupt, so fetch them again.")
  return probs / probs.sum(-1, keepdims=True)

# ***** the math of one step, on probability vectors (on the host) *****

def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
  """Draw a token from a probability vector with one uniform number (inverse CDF); a zero-probability token is never drawn."""
  cdf = np.cumsum(probs)
  return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))

def verify(drafts: list[int], p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> tuple[list[int], list[str]]:
  """Algorithm 2's accept/reject loop for one round: K drafts x̃ with their draft distributions p (K, V) and the
  target's K+1 distributions q (K+1, V). Returns the emitted tokens and where each came from:
  'accepted' (a draft), 'resampled' (from the residual (q - p)+) or 'bonus' (from q after all K were accepted)."""
  for t, x in enumerate(drafts):
    # Algorithm 2: "Sample r ~ U[0, 1] from a uniform distribution."
    r = rng.random()
    # Algorithm 2: "if r < min(1, q(x|x_1..x_{n+t-1}) / p(x|x_1..x_{n+t-1})) then Set x_{n+t} <- x̃_t and n <- n + 1."
    # Written as r·p < q: no division, and a draft the target gives probability 0 is never accepted.
    if r * p[t, x] < q[t, x]: continue
    # Algorithm 2: "sample x_{n+t} ~ (q(x|x_1..x_{n+t-1}) - p(x|x_1..x_{n+t-1}))+ and exit for loop."
    # The residual is normalised by sample(); it can only sum to 0 if p = q up to rounding, and then q is exact.
    residual = np.maximum(q[t] - p[t], 0.0)
    return drafts[:t] + [sample(residual if residual.sum() > 0 else q[t], rng)], ["accepted"] * t + ["resampled"]
  # Algorithm 2: "If all tokens x_{n+1}, ..., x_{n+K} are accepted, sample extra token x_{n+K+1} ~ q(x|x_1..x_n, x_{n+K})"
  return drafts + [sample(q[len(drafts)], rng)], ["accepted"] * len(drafts) + ["bonus"]

# ***** whole generations *****

@dataclass
class Stats:
  new_tokens: int = 0
  target_calls: int = 0
  draft_calls: int = 0
  drafted: int = 0
  accepted: int = 0
  rejected: int = 0         # drafts after a rejection are never checked: α̂ = accepted / (accepted + rejected)
  target_time: float = 0.0  # seconds in the target's forward passes (including the copy of q to the host)
  draft_time: float = 0.0
  total_time: float = 0.0

  @property
  def acceptance_rate(self) -> float: return self.accepted / max(self.accepted + self.rejected, 1)  # α̂, the paper's α
  @property
  def tokens_per_target_call(self) -> float: return self.new_tokens / max(self.target_calls, 1)
  @property
  def draft_call_time(self) -> float: return self.draft_time / max(self.draft_calls, 1)
  @property
  def target_call_time(self) -> float: return self.target_time / max(self.target_calls, 1)
  @property
  def cost_ratio(self) -> float: return self.draft_call_time / self.target_call_time  # c
  @property
  def tokens_per_second(self) -> float: return self.new_tokens / self.total_time

def expected_tokens_per_loop(alpha: float, K: int) -> float:
  """The paper's expected tokens per target call, (1 - α^(K+1)) / (1 - α)."""
  return K + 1.0 if alpha >= 1 else (1 - alpha ** (K + 1)) / (1 - alpha)

def predicted_speedup(alpha: float, K: int, c: float) -> float:
  """Expected speedup over Algorithm 1: (1 - α^(K+1)) / ((1 - α)(Kc + 1))."""
  return expected_tokens_per_loop(alpha, K) / (K * c + 1)

def check_settings(max_new_tokens: int, K: int, temperature: float, top_k: int, top_p: float) -> None:
  """Raise ValueError with one sentence on settings that no sampler can honour."""
  if K < 1: raise ValueError(f"K (the lookahead) is {K}: it must be at least 1.")
  if max_new_tokens < 1: raise ValueError(f"max-new-tokens is {max_new_tokens}: it must be at least 1.")
  if temperature < 0: raise ValueError(f"The temperature is {temperature}: it must be 0 (greedy) or more.")
  if top_k < 0: raise ValueError(f"top-k is {top_k}: it must be 0 (off) or more.")
  if not 0 < top_p <= 1: raise ValueError(f"top-p is {top_p}: it must be in (0, 1], where 1 is off.")

def check_prompt(models: list[GPT2], prompt_tokens: list[int]) -> None:
  """Raise ValueError with one sentence if the models cannot continue this prompt together."""
  n_ctx, vocab = min(m.config.n_ctx for m in models), models[0].config.vocab_size
  if any(m.config.vocab_size != vocab for m in models):
    raise ValueError(f"The draft's vocabulary ({models[-1].config.vocab_size} tokens) differs from the target's ({vocab}): choose two models that share a tokenizer.")
  if not prompt_tokens: raise ValueError("The prompt is empty: give some text to continue.")
  if len(prompt_tokens) >= n_ctx: raise ValueError(f"The prompt is {len(prompt_tokens)} tokens but the context holds {n_ctx}: shorten it to at most {n_ctx - 1}.")
  if not all(0 <= t < vocab for t in prompt_tokens): raise ValueError(f"The prompt has token ids outside the vocabulary of {vocab}.")

def _timed(fn, *args) -> tuple[np.ndarray, float]:
  start = time.perf_counter()
  return fn(*args), time.perf_counter() - start

def autoregressive_sample(model: GPT2, prompt_tokens: list[int], max_new_tokens: int, *, temperature: float = 1.0, top_k: int = 0,
                          top_p: float = 1.0, seed: int = 0, eos: int | None = EOT,
                          stream: Callable[[list[int], list[str]], None] | None = None) -> tuple[list[int], Stats]:
  """Algorithm 1: sample max_new_tokens tokens from the model one forward pass at a time (with its KV cache).

  Stops early at eos or when the context is full. Returns the new tokens and the Stats.
  """
  check_settings(max_new_tokens, 1, temperature, top_k, top_p); check_prompt([model], prompt_tokens)
  rng, settings, stats, start = np.random.default_rng(seed), (temperature, top_k, top_p), Stats(), time.perf_counter()
  x, cached = list(prompt_tokens), 0  # cached: how many leading tokens of x the KV cache holds
  # Algorithm 1: "while n < T do"
  while len(x) - len(prompt_tokens) < max_new_tokens and len(x) < model.config.n_ctx and not (len(x) > len(prompt_tokens) and x[-1] == eos):
    # "Sample x_{n+1} ~ q(x|x_1, ..., x_n)" and "n <- n + 1"
    q, dt = _timed(next_probs, model, x[cached:], cached, 1, settings)
    stats.target_calls, stats.target_time, cached = stats.target_calls + 1, stats.target_time + dt, len(x)
    x.append(sample(q[0], rng))
    if stream: stream(x[-1:], ["target"])
  stats.new_tokens, stats.total_time = len(x) - len(prompt_tokens), time.perf_counter() - start
  return x[len(prompt_tokens):], stats

def speculative_sample(target: GPT2, draft: GPT2, prompt_tokens: list[int], max_new_tokens: int, *, K: int = 4, temperature: float = 1.0,
                       top_k: int = 0, top_p: float = 1.0, seed: int = 0, eos: int | None = EOT,
                       stream: Callable[[list[int], list[str]], None] | None = None) -> tuple[list[int], list[str], Stats]:
  """Algorithm 2: sample max_new_tokens tokens from the target q, drafting K at a time with the draft p.

  The tokens follow the target's distribution exactly (the paper's Theorem 1). Stops early at eos or when the
  context is full. Returns the new tokens, where each came from (see verify), and the Stats.
  """
  check_settings(max_new_tokens, K, temperature, top_k, top_p); check_prompt([target, draft], prompt_tokens)
  rng, settings, stats, start = np.random.default_rng(seed), (temperature, top_k, top_p), Stats(), time.perf_counter()
  n_ctx, n_prompt = min(target.config.n_ctx, draft.config.n_ctx), len(prompt_tokens)
  x, origins = list(prompt_tokens), []
  target_cached = draft_cached = 0  # how many leading tokens of x each model's KV cache holds; the rest is stale
  # Algorithm 2: "while n < T do"
  while len(x) - n_prompt < max_new_tokens and len(x) < n_ctx and not (origins and x[-1] == eos):
    n, k = len(x), min(K, n_ctx - len(x))  # near the end of the context, draft fewer so the target's K+1 positions fit
    # Algorithm 2: "for t = 1 : K do: Sample draft auto-regressively x̃_t ~ p(x|x_1, ..., x_n, x̃_1, ..., x̃_{t-1})"
    # The draft first catches up on the tokens its cache lacks: the prompt, the token emitted last round, and after
    # an all-accept round also x̃_K, which it drafted but never fed.
    drafts, p, feed, pos = [], [], x[draft_cached:], draft_cached
    for _ in range(k):
      p_t, dt = _timed(next_probs, draft, feed, pos, 1, settings)
      stats.draft_calls, stats.draft_time, pos = stats.draft_calls + 1, stats.draft_time + dt, pos + len(feed)
      p.append(p_t[0]); drafts.append(sample(p_t[0], rng)); feed = drafts[-1:]
    # Algorithm 2: "In parallel, compute K + 1 sets of logits from drafts x̃_1, ..., x̃_K:
    #          q(x|x_1, ..., x_n), q(x|x_1, ..., x_n, x̃_1), ..., q(x|x_1, ..., x_n, x̃_1, ..., x̃_K)"
    # One forward pass of [x_n, x̃_1, ..., x̃_K] at position n-1 (plus whatever the target's cache lacks).
    q, dt = _timed(next_probs, target, x[target_cached:] + drafts, target_cached, k + 1, settings)
    stats.target_calls, stats.target_time = stats.target_calls + 1, stats.target_time + dt
    # Algorithm 2: "for t = 1 : K do" accept or reject each draft, then the bonus token (see verify)
    new, came_from = verify(drafts, np.stack(p), q, rng)
    stats.drafted, stats.accepted = stats.drafted + k, stats.accepted + len(new) - 1
    stats.rejected += came_from[-1] == "resampled"
    # Roll back: both caches keep x_1..x_n and the accepted drafts; what they hold past that is overwritten next round.
    target_cached, draft_cached = n + len(new) - 1, min(pos, n + len(new) - 1)
    # Never overshoot: stop at max_new_tokens, at the end of the context, and at eos even inside an accepted run.
    new = new[:min(max_new_tokens - (n - n_prompt), n_ctx - n)]
    if eos in new: new = new[:new.index(eos) + 1]
    x += new; origins += came_from[:len(new)]
    if stream: stream(new, came_from[:len(new)])
  stats.new_tokens, stats.total_time = len(x) - n_prompt, time.perf_counter() - start
  return x[n_prompt:], origins, stats

# ***** command line *****

COLOURS = {"accepted": "\033[32m", "resampled": "\033[33m", "bonus": "\033[35m"}  # green, yellow, magenta

def printer(enc, trace: bool) -> Callable[[list[int], list[str]], None]:
  """A stream callback that prints tokens as they arrive (whole UTF-8 characters only), coloured by origin if trace."""
  utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
  def show(tokens: list[int], origins: list[str]) -> None:
    for t, o in zip(tokens, origins):
      text = "" if t == EOT else utf8.decode(enc.decode_single_token_bytes(t))
      print(f"{COLOURS[o]}{text}\033[0m" if trace and o in COLOURS else text, end="", flush=True)
  return show

def report(stats: Stats, K: int | None = None) -> str:
  """The stats block: counts, α̂ against the paper's expected tokens per call, times, c and tokens/s."""
  lines = [f"new tokens            {stats.new_tokens}", f"target calls          {stats.target_calls}"]
  if K is not None:
    a = stats.acceptance_rate
    lines += [f"draft calls           {stats.draft_calls}",
              f"acceptance rate α̂     {a:.3f} ({stats.accepted} of {stats.accepted + stats.rejected} checked drafts accepted, {stats.drafted} drafted)",
              f"tokens/target call    {stats.tokens_per_target_call:.2f} (paper's (1 - α^(K+1)) / (1 - α) at α̂: {expected_tokens_per_loop(a, K):.2f})",
              f"time per draft call   {1e3 * stats.draft_call_time:.1f} ms",
              f"time per target call  {1e3 * stats.target_call_time:.1f} ms (c = {stats.cost_ratio:.3f})"]
  else: lines += [f"time per target call  {1e3 * stats.target_call_time:.1f} ms"]
  return "\n".join(lines + [f"tokens per second     {stats.tokens_per_second:.2f}"])

def parse_args(argv: list[str] | None) -> argparse.Namespace:
  ap = argparse.ArgumentParser(description="Speculative sampling (Chen et al. 2023, Algorithm 2) with GPT-2 in tinygrad.")
  ap.add_argument("--prompt", required=True, help="text to continue")
  ap.add_argument("--target", default="gpt2-xl", help="target model q: gpt2, gpt2-medium, gpt2-large, gpt2-xl, or a checkpoint folder")
  ap.add_argument("--draft", default="gpt2", help="draft model p: a name or a checkpoint folder, as for --target")
  ap.add_argument("-K", "--lookahead", type=int, default=4, help="draft tokens per round (default 4)")
  ap.add_argument("--max-new-tokens", type=int, default=128)
  ap.add_argument("--temperature", type=float, default=1.0, help="0 means greedy (default 1.0)")
  ap.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens; 0 is off")
  ap.add_argument("--top-p", type=float, default=1.0, help="keep the most likely tokens up to this mass; 1 is off")
  ap.add_argument("--seed", type=int, default=0, help="one seed drives every draw: same seed, same tokens")
  ap.add_argument("--compare", action="store_true", help="also run Algorithm 1 with the same settings and print the speedup")
  ap.add_argument("--trace", action="store_true", help="colour tokens: green accepted draft, yellow resampled, magenta bonus")
  ap.add_argument("--device", help="tinygrad device (CPU, CUDA, METAL, ...); default: tinygrad's choice or $DEV")
  ap.add_argument("--half", action="store_true", help="load the weights as float16 (half the memory; for GPUs)")
  ap.add_argument("--tokenizer", help="folder with GPT-2's encoder.json and vocab.bpe (default: tiktoken's download and cache)")
  return ap.parse_args(argv)

def run(args: argparse.Namespace) -> None:
  check_settings(args.max_new_tokens, args.lookahead, args.temperature, args.top_k, args.top_p)
  if not args.prompt: raise ValueError("The prompt is empty: give some text to continue.")
  if args.device:
    try: DEV.value = Device[args.device.upper()].device  # open it now, so an unusable device fails here
    except Exception as e: raise ValueError(f"The device {args.device} is not usable here ({type(e).__name__}): try CPU, CUDA or METAL.") from None
  enc = load_tokenizer(args.tokenizer)
  dtype = dtypes.float16 if args.half else dtypes.float32
  target, draft, prompt = load_model(args.target, dtype), load_model(args.draft, dtype), enc.encode(args.prompt)
  if target.config.vocab_size != enc.n_vocab:
    raise ValueError(f"{args.target} has a vocabulary of {target.config.vocab_size} tokens, not GPT-2's {enc.n_vocab}: the GPT-2 tokenizer cannot drive it.")
  check_prompt([target, draft], prompt)
  settings = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
  print(f"warming up on {Device.DEFAULT} (compiling kernels)...", file=sys.stderr)
  speculative_sample(target, draft, prompt, 3 * (args.lookahead + 1), K=args.lookahead, **settings)
  if args.compare: autoregressive_sample(target, prompt, 3, **settings)
  print(args.prompt, end="", flush=True)
  _, _, stats = speculative_sample(target, draft, prompt, args.max_new_tokens, K=args.lookahead, stream=printer(enc, args.trace), **settings)
  print(f"\n\n--- Algorithm 2 (speculative): target {args.target}, draft {args.draft}, K={args.lookahead}, device {Device.DEFAULT}")
  print(report(stats, args.lookahead))
  if args.compare:
    _, base = autoregressive_sample(target, prompt, args.max_new_tokens, **settings)
    predicted = predicted_speedup(stats.acceptance_rate, args.lookahead, stats.cost_ratio)
    print(f"\n--- Algorithm 1 (auto-regressive): target {args.target}\n{report(base)}")
    print(f"\nspeedup               {stats.tokens_per_second / base.tokens_per_second:.2f}x measured, "
          f"{predicted:.2f}x predicted by (1 - α^(K+1)) / ((1 - α)(Kc + 1)) from α̂ and c")

def main(run: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
  """Run a command: bad input, or a model or tokenizer that cannot be had, ends it with one sentence on stderr and exit code 2."""
  try: run(args)
  except (ValueError, LoadError, FloatingPointError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return 0

if __name__ == "__main__":
  sys.exit(main(run, parse_args(None)))
