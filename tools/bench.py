"""Measure speculative sampling's speedup as Chen et al. (2023) do (Table 1, Figure 1), on this machine.

    python -m tools.bench --target gpt2-xl --draft gpt2                        # the table for K = 4
    python -m tools.bench --target gpt2-xl --draft gpt2 --sweep 1,2,3,4,5,6    # one row per K; Figure 1 as PNGs
    python -m tools.bench --random --target gpt2 --draft 2,4,256 --greedy      # random weights: no download
    python -m tools.bench --random --target gpt2 --scoring                     # one call of m tokens: the time
    python -m tools.bench --random --target gpt2 --draft ngram --prompt "..."  # prompt lookup, on your prompt
    python -m tools.bench --target ckpt/big --draft ckpt/small --vs-hf         # against Hugging Face's
    DEV=NULL NULL_ALLOW_COPYOUT=1 python -m tools.bench --random --target gpt2-xl --scoring   # host work alone

Method: after a warm-up that compiles every kernel, each prompt is continued by Algorithm 1 and then by
Algorithm 2 with the same seed, prompt by prompt, so that a change of load on the machine touches both
alike. Every run makes exactly --max-new-tokens tokens (no stop at <|endoftext|>). The table's ms a token and
speedup are the decode's, the prompt's prefill left out of both; the time plot includes it, as a user waits
for it. After each run a round's parts (the draft's steps, the target's K+1 rows and the round's own work, each
a compiled call), Algorithm 1's call and, as a check, the round itself are replayed in turn: the cost model's c,
s and v, and its prediction from the parts beside the measured speedup. The table pools the prompts; the plots
show their mean and standard deviation. Set the device with DEV=... On DEV=NULL (tinygrad's device that runs no
kernel and reads back zeros) every time is host work: what Python and tinygrad spend around the kernels.

Where the time goes: the table's header gives the weights each algorithm reads per token, its footer the
memory-bandwidth floor (the target's weights ÷ the bandwidth: --bandwidth, or measured) and each algorithm
against it. --scoring times one target call of m tokens alone: in total, its host part, and t(m)/t(1).
"""
from __future__ import annotations
import argparse, json, math, os, pathlib, platform, statistics, sys, tempfile, textwrap, time
from dataclasses import asdict, fields, replace
import numpy as np
import tiktoken
from tinygrad import Context, Device, Tensor, TinyJit, dtypes
from tinygrad.helpers import GlobalCounters, tqdm
from costs import TIMED_APART, Costs, Stats, break_even_alpha, expected_tokens_per_round, measured_over_predicted
from costs import predicted_speedup
from gpt2 import GPT2
from sampling import Sampling
from speculative import Draft, autoregressive_sample, speculative_sample
from weights import LoadError, checkpoint_dir, load_tokenizer, save_model, weights_of
from engine.compiled import Compiled, beam_of, calls, step
from tools.parts import time_parts
from tools.session import choose_draft, load_models, load_named, main, open_run, options, search_kernels, setting
from tools.session import warm_up, warm_up_baseline

GPT2_VOCAB = 50257
PROMPT_LEN = 8  # built-in prompts are cut to this many tokens: all runs compile and replay the same kernels
PROMPTS = [
  "Alan Turing theorized that computers would one day become the most powerful machines on the planet.",
  "The capital of France is a city of art, fashion and food, and its museums draw millions of visitors.",
  "In the beginning of the twentieth century, physicists found that light behaves both as a wave and "
  "a particle.",
  "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)",
  "Once upon a time, in a small village at the edge of a dark forest, there lived an old woodcutter.",
  "The stock market fell sharply on Monday as investors worried about rising interest rates and inflation.",
  "To make a good cup of coffee, start with freshly roasted beans and grind them just before brewing.",
  "The mitochondria is the powerhouse of the cell, turning nutrients into the energy that the cell needs.",
]
# A per-draft α for the real gpt2-xl target drafted by gpt2 (temperature 1, top-k 50, top-p 0.9), which this
# project cannot download: garg-aayush/building-from-scratch, llm-inference/benchmark_results/
# summary_speculative.csv (float16, RTX 4090) measured accepted ÷ drafted 0.527 at K = 3 and 0.455 at K = 4,
# which the i.i.d. model (accepted ÷ drafted = (α + ... + α^K) / K) fits with α = 0.71 (0.66 to 0.74 over its
# dtypes and K). The measured costs are also priced at this α.
ALPHA_REAL = 0.71
SCORING_M = range(1, 9)  # --scoring times one call of each of these many tokens, m
SCORING_REPS = 7         # and takes the median of this many calls, after the one that compiles and captures

# ***** models and prompts *****

def find_tokenizer(folder: str | None) -> tiktoken.Encoding | None:
  """GPT-2's tokenizer from folder if given, else the one shipped in demo/ (or tiktoken's); None if there is
  none."""
  try:
    return load_tokenizer(folder)
  except LoadError:
    if folder:
      raise  # asked for by name: if it cannot be had, say so
    return None

def prompt_set(args: argparse.Namespace, vocab_size: int) -> tuple[list[list[int]], str]:
  """--prompts prompts and where they come from: --prompt whole, or the built-in ones cut to PROMPT_LEN tokens
  (fixed random ids for a model without GPT-2's vocabulary, or when no tokenizer can be had)."""
  enc = find_tokenizer(args.tokenizer) if vocab_size == GPT2_VOCAB else None
  if args.prompt is not None:
    if enc is None:
      raise ValueError(f"--prompt needs GPT-2's tokenizer and a model with its {GPT2_VOCAB} tokens.")
    return [enc.encode(args.prompt)] * args.prompts, "your prompt, whole"
  if enc is None:
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, vocab_size, PROMPT_LEN).tolist() for _ in range(args.prompts)]
    return prompts, "fixed random token ids"
  prompts = [enc.encode(PROMPTS[i % len(PROMPTS)])[:PROMPT_LEN] for i in range(args.prompts)]
  return prompts, f"built-in, cut to {PROMPT_LEN} tokens"

def host_cpu() -> str:
  """The host's CPU model (its architecture where the system does not say)."""
  cpu = platform.processor() or platform.machine()
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as f:
      cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
  return cpu

def machine() -> str:
  """The tinygrad device and, on the host, the CPU model and its core count."""
  return f"{Device.DEFAULT} (host: {host_cpu()}, {os.cpu_count()} cores)"

# ***** Algorithm 1 against Algorithm 2 *****

def total(stats: list[Stats]) -> Stats:
  """The Stats of several runs pooled: counts and times added, the steps and round timed after each run averaged
  (stopped_by, a word, is left out)."""
  numbers = [f.name for f in fields(Stats) if f.name not in ("stopped_by", *TIMED_APART)]
  pooled = Stats(**{name: sum(getattr(s, name) for s in stats) for name in numbers})
  for name in TIMED_APART:
    setattr(pooled, name, float(np.mean([getattr(s, name) for s in stats])))
  return pooled

def run_pairs(target: GPT2, draft: Draft, prompts: list[list[int]], n_tokens: int, K: int,
              sampling: Sampling, bar: tqdm, search: bool) -> list[tuple[Stats, Stats]]:
  """Warm up (and with search, search the kernels), then timed_pairs."""
  warm_up(target, draft, prompts[0], K, sampling, 0)
  warm_up_baseline(target, prompts[0], K, sampling, 0)
  if search:
    # the steps that the round's parts are timed on are compiled first, so that they are searched too: else
    # the round would run searched kernels and its parts default ones
    time_parts(target, draft, K, sampling, Stats(), prompts[0], reps=1)
    search_kernels(calls(target, *draft.models), math.inf)  # asked for: searched to the end
  return timed_pairs(target, draft, prompts, n_tokens, K, sampling, bar)

def timed_pairs(target: GPT2, draft: Draft, prompts: list[list[int]], n_tokens: int, K: int,
                sampling: Sampling, bar: tqdm) -> list[tuple[Stats, Stats]]:
  """Continue each prompt i with Algorithm 1 and Algorithm 2, both with seed i, their calls compiled before, each
  Algorithm 2 run followed by a round, its parts and Algorithm 1's call timed in turn (time_parts): their Stats."""
  runs = []
  for seed, prompt in enumerate(prompts):
    base = autoregressive_sample(target, prompt, n_tokens, sampling=sampling, seed=seed, rows=K + 1, eos=None)[1]
    tokens, _, spec = speculative_sample(target, draft, prompt, n_tokens, K=K, sampling=sampling, seed=seed,
                                         eos=None)
    time_parts(target, draft, K, sampling, spec, prompt + tokens)
    runs.append((base, spec))
    bar.update(1)
  return runs

def summarize(K: int, runs: list[tuple[Stats, Stats]]) -> dict:
  """One row of the table from the runs of one K: pooled figures, and per-prompt ones for the plots. The
  speedup is the decode's (the prompts' prefill left out of both); the cost model's c, s and v come from the
  round's parts and Algorithm 1's call timed in turn after each run (a round is one compiled call: its parts
  cannot be timed in it); the round's replay is compared with its parts, never priced."""
  base, spec = total([b for b, _ in runs]), total([s for _, s in runs])
  alpha, costs = spec.acceptance_rate, spec.costs
  speedup, predicted = base.ms_per_token / spec.ms_per_token, predicted_speedup(alpha, costs)
  return {"K": K, "alg1_ms_per_token": base.ms_per_token, "alg2_ms_per_token": spec.ms_per_token,
          "speedup": speedup, "alpha": alpha, "tokens_per_target_call": spec.tokens_per_target_call,
          "mean_drafted": costs.K, "plain_share": costs.plain,
          "c": costs.c, "c_first": costs.first, "s": costs.s, "v": costs.v, "predicted": predicted,
          # Leviathan et al.'s E / (Kc + 1) (prompt lookup's plain rounds, 1 token for t(1), mixed in)
          "predicted_ideal": predicted_speedup(alpha, replace(costs, first=costs.c, s=1.0, v=0.0)),
          "break_even_alpha": break_even_alpha(costs), "measured_over_predicted": speedup / predicted,
          "draft_first_step_ms": 1e3 * spec.draft_first_time, "draft_step_ms": 1e3 * spec.draft_call_time,
          "target_step_ms": 1e3 * spec.target_call_time, "work_ms": 1e3 * spec.work_time,
          "t1_ms": 1e3 * spec.token_call_time,
          # measured ÷ predicted, term by term: their product (costs.measured_over_predicted)
          "measured_over_predicted_terms": measured_over_predicted(spec, base),
          # Algorithm 2's round: one compiled call (K draft steps, the target's K+1 rows, tests, draws, read)
          "ms_per_round": 1e3 * spec.round_call_time,
          # a round replayed ÷ its parts and own work, timed in turn (never a term of predicted)
          "round_over_parts": spec.round_over_parts, "round_replay_ms": 1e3 * spec.round_replay_time,
          "calls_per_round": spec.compiled_calls / spec.rounds,
          "host_ms_per_round": 1e3 * spec.host_time / spec.compiled_calls,
          "alg1_seconds": [b.total_time for b, _ in runs], "alg2_seconds": [s.total_time for _, s in runs],
          "tokens_per_round": [s.tokens_per_target_call for _, s in runs],
          "round_seconds": [s.round_call_time for _, s in runs],
          "draft_seconds_per_round": [s.draft_round_time for _, s in runs],
          "work_seconds_per_round": [s.work_time for _, s in runs],
          "target_seconds_per_round": [s.target_call_time for _, s in runs],
          "alg1": asdict(base), "alg2": asdict(spec)}

# ***** where the time goes: one call, the bytes it reads, the bandwidth *****

def scoring_cost(model: GPT2, lengths: range, reps: int, sampling: Sampling,
                 search: bool) -> dict[int, tuple[float, float]]:
  """Per m: the median seconds of one compiled step of m rows with its probabilities read on the host, and of
  its host part, the time until the step's call returns. With search, the kernels are searched first, untimed.

  On an asynchronous device (CUDA, Metal) the call returns once its kernels are queued, so the host part is
  the host work (binding the Variables, launching the compiled step), the rest the device's and the copy's.
  On the CPU backend the kernels run inside the call, so there the host part includes them.
  """
  times: dict[int, list[tuple[float, float]]] = {m: [] for m in lengths}
  for r in tqdm(range(reps + 1), desc="scoring (rounds over m)"):
    if r == 1 and search:
      search_kernels(calls(model), math.inf)
    for m in lengths:  # m interleaved, so that a change of load on the machine touches every m alike
      start = time.perf_counter()
      call = step(model, m, sampling)
      out = call(PROMPT_LEN + r, *[0] * m)
      returned = time.perf_counter()
      call.to_host(out).copy().astype(np.float64)  # as compiled.logits and reference.next_probs read it
      if r >= 1:  # the first call of a shape compiles and captures its compiled step
        times[m].append((time.perf_counter() - start, returned - start))
  median = statistics.median
  return {m: (median(t for t, _ in pairs), median(h for _, h in pairs)) for m, pairs in times.items()}

def model_bytes(model: GPT2) -> int:
  """The bytes of the model's weights (weights_of: not its KV caches, nor its compiled calls' results), which one
  call reads at least once."""
  return sum(w.nbytes() for w in weights_of(model).values())

def step_cost(model: GPT2, rows: int, sampling: Sampling) -> tuple[int, float]:
  """The kernels of one compiled step of `rows` rows (with its Sampling head, at position PROMPT_LEN), and the
  bytes they touch ÷ the weights' bytes, as tinygrad counts them: each buffer a kernel reads or writes, once.
  The step is compiled again for this with JIT=2, without JIT graphs, which tinygrad counts as one kernel."""
  call = step(model, rows, sampling)
  with Context(JIT=2):
    alone = Compiled(call.name, call.signature, call.beam, call.build)
    for _ in range(2):  # compile and capture, then count one replay
      GlobalCounters.reset()
      alone(PROMPT_LEN, *[0] * rows)
  return GlobalCounters.kernel_count, GlobalCounters.global_mem / model_bytes(model)

def step_costs(target: GPT2, draft: Draft, Ks: list[int], sampling: Sampling) -> dict:
  """step_cost of each model's steps of 1 row and of K+1 rows: {"target": {rows: (kernels, bytes ratio)}, ...}."""
  models = dict(zip(("target", "draft"), [target, *draft.models]))
  return {name: {rows: step_cost(model, rows, sampling) for rows in sorted({1} | {K + 1 for K in Ks})}
          for name, model in models.items()}

def costs_line(costs: dict) -> str:
  """step_costs in words."""
  parts = [f"{name} " + ", ".join(f"{rows} row{'s' * (rows > 1)} {k} ({ratio:.2f}x)"
                                  for rows, (k, ratio) in by.items()) for name, by in costs.items()]
  return "kernels per step, and the bytes they touch ÷ the weights' (tinygrad's count): " + "; ".join(parts)

def measure_bandwidth(nbytes: int = 1 << 30) -> float:
  """Bytes per second the device reads: the best of 5 compiled sums over a buffer of nbytes (after 2 that
  compile and capture), each reading it once."""
  x = Tensor.ones(nbytes // 4, dtype=dtypes.float32).contiguous().realize()  # written, so every page is real
  read = TinyJit(lambda: x.sum().realize())
  times = []
  for _ in range(7):
    Device[Device.DEFAULT].synchronize()
    start = time.perf_counter()
    read()
    Device[Device.DEFAULT].synchronize()
    times.append(time.perf_counter() - start)
  return nbytes / min(times[2:])

def find_bandwidth(given_gb_s: float | None) -> tuple[float | None, str]:
  """Bytes per second for the floor, and where the figure comes from: --bandwidth, a measurement, or none."""
  if given_gb_s:
    return given_gb_s * 1e9, "given"
  if Device.DEFAULT == "NULL":
    return None, "not measured on DEV=NULL, which runs no kernel: give one with --bandwidth GB/s"
  return measure_bandwidth(), "measured: a compiled sum over 1 GiB"

def floor_lines(target_bytes: int, bandwidth: float | None, source: str,
                timings: dict[str, float]) -> list[str]:
  """The memory-bandwidth floor of one call of the target (reading its weights once), and each timing
  (what: milliseconds) against it."""
  if bandwidth is None:
    return [f"memory-bandwidth floor: no bandwidth ({source})"]
  floor_ms = 1e3 * target_bytes / bandwidth
  lines = [f"memory-bandwidth floor: {target_bytes / 1e9:.3f} GB ÷ {bandwidth / 1e9:.1f} GB/s ({source}) "
           f"= {floor_ms:.2f} ms per target call"]
  if Device.DEFAULT == "NULL":  # no kernel ran: each time is host work, to set against the device's floor
    return lines + [f"{what}, host work only: {ms:.2f} ms = {ms / floor_ms:.2f}x the floor"
                    for what, ms in timings.items()]
  for what, ms in timings.items():
    lines.append(f"{what}: {ms:.2f} ms = {ms / floor_ms:.2f}x the floor ({100 * floor_ms / ms:.0f}% of peak "
                 "bandwidth)")
  return lines

# ***** Hugging Face assisted generation, side by side *****

def vs_hf(target: GPT2, draft: Draft, folders: tuple[str, str], prompts: list[list[int]], n_tokens: int,
          K: int) -> dict:
  """Greedy, same K: tokens/s of Algorithm 2 here and of transformers' assisted generation, same weights."""
  try:
    import torch, transformers
  except ImportError:
    raise ValueError("--vs-hf needs transformers and torch: see requirements-hf.txt.") from None
  transformers.logging.set_verbosity_error()  # keep the table readable
  transformers.logging.disable_progress_bar()
  hf_target, hf_draft = (transformers.GPT2LMHeadModel.from_pretrained(f).eval() for f in folders)
  hf_draft.generation_config.num_assistant_tokens = K                     # K drafts a round: transformers 5
  hf_draft.generation_config.num_assistant_tokens_schedule = "constant"  # reads it here, and keeps it fixed
  hf_draft.generation_config.assistant_confidence_threshold = 0.0         # and draft all K, however unsure
  def hf(prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
      out = hf_target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=hf_draft,
                               num_assistant_tokens=K, do_sample=False, max_new_tokens=n_tokens,
                               min_new_tokens=n_tokens, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()
  def ours(prompt: list[int]) -> list[int]:
    return speculative_sample(target, draft, prompt, n_tokens, K=K, sampling=Sampling(0), eos=None)[0]
  result = {}
  for name, generate in (("hf", hf), ("ours", ours)):
    for prompt in prompts[:2]:
      generate(prompt)  # warm-up
    start = time.perf_counter()
    result[name + "_tokens"] = [generate(p) for p in prompts]
    result[name + "_tokens_per_second"] = n_tokens * len(prompts) / (time.perf_counter() - start)
  result["ratio"] = result["ours_tokens_per_second"] / result["hf_tokens_per_second"]
  result["torch_threads"] = torch.get_num_threads()
  result["same_tokens"] = sum(a == b for a, b in zip(result["hf_tokens"], result["ours_tokens"]))
  return result

# ***** output *****

# The table's columns, (header, the row's key, its format): the paper's Table 1, then the cost model's, then
# the round's own
COLUMNS = [("K", "K", "{}"), ("Alg1 ms/tok", "alg1_ms_per_token", "{:.1f}"),
           ("Alg2 ms/tok", "alg2_ms_per_token", "{:.1f}"), ("speedup", "speedup", "{:.2f}x"), ("α̂", "alpha", "{:.2f}"),
           ("tok/round", "tokens_per_target_call", "{:.2f}"),
           ("c₁", "c_first", "{:.3f}"), ("c", "c", "{:.3f}"), ("s", "s", "{:.2f}"), ("v", "v", "{:.2f}"),
           ("ideal", "predicted_ideal", "{:.2f}x"),
           ("predicted", "predicted", "{:.2f}x"), ("meas/pred", "measured_over_predicted", "{:.2f}"),
           ("break-even α", "break_even_alpha", "{:.2f}"), ("ms/round", "ms_per_round", "{:.2f}"),
           ("round/parts", "round_over_parts", "{:.2f}"), ("host ms/round", "host_ms_per_round", "{:.2f}"),
           ("calls/round", "calls_per_round", "{:.2f}")]
LEGEND = ("Alg1 and Alg2 ms/tok: after the prompt's prefill, which is left out of both (as Chen et al.'s Table 1 "
          "gives ms a token); speedup: their ratio. The cost model (Leviathan et al. 2022) prices a round in "
          "t(1), Algorithm 1's call (a token, read), from its parts, each a compiled call timed alone, in turn "
          "after each run: c₁, the round's first draft step (2 rows) ÷ t(1); c, a later one (1 row) ÷ t(1) (for "
          "prompt lookup, its lookup on the host per draft); s, the target's scoring step of K+1 rows ÷ t(1); v, the "
          "round's own work (the draws of x̃, the tests, the last draw, the read) ÷ t(1). ideal: E / (Kc + 1), "
          "Leviathan et al.'s, with E = (1 − α̂^(K+1)) / (1 − α̂) (K: the mean drafted in a round that drafts), s = 1 "
          "and v = 0. predicted: E / (c₁ + (K−1)c + s + v); each part pays its own launch, which a round pays "
          "once; prompt lookup's rounds that find nothing, plain target steps, are mixed into both at 1 token for "
          "t(1). "
          "meas/pred: speedup ÷ predicted (in the JSON, term by term). break-even α: where E equals a round's "
          "cost in t(1) (0: a round costs at most one token's call; none: not even K+1 tokens a round would "
          "pay). ms/round: one compiled round, from its launch until its tokens are read on the host (on "
          "DEV=NULL: the host work of one whole round). round/parts: the check, a round replayed ÷ its parts "
          "and v (medians), never a term of predicted. host ms/round: until the launch returns (on CUDA or "
          "Metal, the host's own work; on the CPU the kernels run inside it). calls/round: compiled calls "
          "launched per round.")

def table(rows: list[dict], columns: list[tuple[str, str, str]] = COLUMNS) -> str:
  """One line per K, each column as wide as its header or widest cell."""
  cells = [["none" if r[key] is None else form.format(r[key]) for _, key, form in columns] for r in rows]
  widths = [max(len(header), *(len(row[i]) for row in cells)) for i, (header, _, _) in enumerate(columns)]
  lines = ["  ".join(header.rjust(w) for (header, _, _), w in zip(columns, widths))]
  lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in cells]
  return "\n".join(lines)

def at_real_alpha(rows: list[dict], sampling: Sampling) -> str:
  """What each K's measured costs (at the run's setting) predict at α = ALPHA_REAL, real gpt2-xl + gpt2's
  estimate, and the best K."""
  speedups = {r["K"]: predicted_speedup(ALPHA_REAL, row_costs(r)) for r in rows}
  best = max(speedups, key=speedups.get)
  return (f"predicted at α = {ALPHA_REAL} (not measured: real gpt2-xl drafted by gpt2, as measured elsewhere; "
          f"see ALPHA_REAL) from each K's c₁, c, s and v, measured at {setting(sampling)}: "
          + ", ".join(f"K={K} {x:.2f}x" for K, x in speedups.items()) + f"; the best measured K there: {best}")

def row_costs(r: dict) -> Costs:
  """A table row's measured costs, in t(1)."""
  return Costs(r["mean_drafted"], r["c"], r["c_first"], r["s"], r["v"], r["plain_share"])

def bytes_line(rows: list[dict], target_bytes: int, draft_bytes: int) -> str:
  """Weights read per emitted token: the target's for Algorithm 1; (K·draft + target) ÷ tokens per target call
  for Algorithm 2."""
  def alg2(r: dict) -> str:
    return f"K={r['K']} {(r['K'] * draft_bytes + target_bytes) / r['tokens_per_target_call'] / 1e9:.3f} GB"
  return (f"weights: target {target_bytes / 1e9:.3f} GB, draft {draft_bytes / 1e9:.3f} GB. Read per token: "
          f"Algorithm 1 {target_bytes / 1e9:.3f} GB; "
          "Algorithm 2, (K·draft + target) ÷ tokens per target call: "
          + ", ".join(alg2(r) for r in rows))

def plot(rows: list[dict], header: str, n_tokens: int, out: pathlib.Path, tag: str) -> list[pathlib.Path]:
  """The paper's Figure 1 (which says "loop" for a round), one PNG per panel against K: time to generate
  n_tokens (the prefill included), tokens per round / (K+1), and time per round."""
  try:
    import matplotlib
    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt
  except ImportError:
    raise ValueError("--sweep draws its plots with matplotlib: pip install matplotlib.") from None
  Ks = [r["K"] for r in rows]
  def errorbar(ax, key: str, label: str, scale: float = 1.0) -> None:  # mean ± sd over prompts, per K
    means, sds = [scale * np.mean(r[key]) for r in rows], [scale * np.std(r[key]) for r in rows]
    ax.errorbar(Ks, means, sds, marker="o", capsize=3, label=label)
  def save(fig, ax, title: str, ylabel: str, name: str) -> pathlib.Path:
    ax.set_title(f"{title}\n{header}", fontsize=9)
    ax.set_xlabel("K (draft tokens per round)")
    ax.set_ylabel(ylabel)
    ax.set_xticks(Ks)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / f"{tag}-{name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  errorbar(ax, "alg2_seconds", "Algorithm 2 (speculative)")
  base = [t for r in rows for t in r["alg1_seconds"]]  # Algorithm 1 does not depend on K: all its runs pooled
  ax.axhline(np.mean(base), color="grey", ls="--", label="Algorithm 1 (auto-regressive), ± sd shaded")
  ax.axhspan(np.mean(base) - np.std(base), np.mean(base) + np.std(base), color="grey", alpha=0.15)
  paths = [save(fig, ax, f"Time to generate {n_tokens} tokens, prefill included", "seconds (mean ± sd over prompts)",
                "time")]

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  per_slot = [np.array(r["tokens_per_round"]) / (r["K"] + 1) for r in rows]
  ax.errorbar(Ks, [s.mean() for s in per_slot], [s.std() for s in per_slot], marker="o", capsize=3,
              label="measured")
  ax.plot(Ks, [expected_tokens_per_round(r["alpha"], r["K"]) / (r["K"] + 1) for r in rows], "k--",
          label="expected from α̂: (1 − α̂^(K+1)) / ((1 − α̂)(K + 1))")
  ylabel = "mean tokens per round / (K + 1)"
  paths.append(save(fig, ax, "Tokens per round / (K + 1)", ylabel, "accepted"))

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  curves = (("round_seconds", "whole round (one compiled call)"),
            ("target_seconds_per_round", "target step of K + 1 tokens, timed apart"),
            ("draft_seconds_per_round", "the K draft steps (2 rows, then 1), timed apart"),
            ("work_seconds_per_round", "the round's own work (draws, tests, read), timed apart"))
  for key, label in curves:
    errorbar(ax, key, label, scale=1e3)
  paths.append(save(fig, ax, "Time per round", "milliseconds (mean ± sd over prompts)", "round"))
  return paths

# ***** command line *****

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  """The command line's settings; --help shows them, with this module's docstring as the epilog."""
  doc_first, doc_rest = __doc__.split("\n", 1)
  ap = argparse.ArgumentParser(description=doc_first, epilog=doc_rest,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  options(ap, max_new_tokens=64)
  ap.add_argument("--greedy", action="store_const", dest="temperature", const=0.0,
                  help="temperature 0: the argmax at every step")
  ap.add_argument("--sweep", help="comma-separated K values: one row each, and Figure 1 as PNGs")
  ap.add_argument("--prompts", type=int, default=4, help=f"how many prompts (default 4), the built-in ones "
                  f"cut to {PROMPT_LEN} tokens; prompt i uses seed i")
  ap.add_argument("--prompt", help="your own prompt, used whole: --prompts times, with seeds 0, 1, ...")
  ap.add_argument("--scoring", action="store_true", help=f"only time one target call of m = {SCORING_M[0]}.."
                  f"{SCORING_M[-1]} tokens: in total, its host part, and against m = 1")
  ap.add_argument("--search", action="store_true", help="search the fastest kernels before timing (minutes "
                  "the first time on a machine, then cached; never timed)")
  ap.add_argument("--bandwidth", type=float, help="the device's memory bandwidth in GB/s, for the floor "
                  "(default: measured with a sum over 1 GiB; not on DEV=NULL)")
  ap.add_argument("--vs-hf", action="store_true", help="also run transformers' assisted generation "
                  "(greedy, K from -K) and print the tokens/s ratio")
  ap.add_argument("--out", default="bench_out", help="folder for the JSON results and the PNG plots")
  return ap.parse_args(argv)

def parse_sweep(args: argparse.Namespace) -> list[int]:
  """The K values to measure: --sweep's, or -K alone."""
  if not args.sweep:
    return [args.lookahead]
  try:
    return [int(k) for k in args.sweep.split(",")]
  except ValueError:
    raise ValueError(f"--sweep is '{args.sweep}': give comma-separated K values such as 1,2,4.") from None

def open_bench(args: argparse.Namespace, Ks: list[int]) -> Sampling:
  """Refuse bad settings with one sentence each, before any model loads (bench.py's own, then session.open_run);
  return the sampling settings."""
  if args.prompts < 1:
    raise ValueError(f"--prompts is {args.prompts}: it must be at least 1.")
  if args.bandwidth is not None and not args.bandwidth > 0:
    raise ValueError(f"--bandwidth is {args.bandwidth}: give the device's bandwidth in GB/s, more than 0.")
  if args.vs_hf and not choose_draft(args.draft, args.ngram_max, lambda name: name).models:
    raise ValueError("--vs-hf compares two models: give a draft model, not ngram.")
  return open_run(args, Ks, 0, args.prompt)

def describe(args: argparse.Namespace) -> str:
  """The target and the draft, as the output's header names them."""
  kind = " (random weights: the costs are real, α̂ is not GPT-2's)" if args.random else ""
  return f"target {args.target}, draft {args.draft}{kind}"

def run_scoring(args: argparse.Namespace, sampling: Sampling) -> None:
  """--scoring: the time of one target call per m, its host part, t(m)/t(1), the arithmetic rate, and t(1)
  against the floor."""
  target = load_named(args, args.target, seed=0)
  cost = scoring_cost(target, SCORING_M, SCORING_REPS, sampling, args.search)
  kind = " (random weights)" if args.random else ""
  print(f"\ndevice {machine()}\ntarget {args.target}{kind}: one call of m tokens with a Sampling head, then "
        f"its probabilities copied to the host; median of {SCORING_REPS}\n"
        f"{kernels(calls(target), beam_of(target))}")
  target_bytes = model_bytes(target)
  params = target_bytes // target.wte.weight.dtype.itemsize
  print("  m   total ms    host ms   host share   t(m)/t(1)   GFLOP/s   kernels   bytes ÷ weights")
  for m, (t, host) in cost.items():
    rate = "-" if Device.DEFAULT == "NULL" else f"{2 * params * m / t / 1e9:.1f}"  # NULL runs no arithmetic
    kernel_count, ratio = step_cost(target, m, sampling)
    print(f"{m:>3}  {1e3 * t:>9.3f}  {1e3 * host:>9.3f}  {100 * host / t:>10.0f}%  {t / cost[1][0]:>10.2f}"
          f"  {rate:>8}  {kernel_count:>8}  {ratio:>16.3f}")
  print("host: the time until the step's call returns, before its result is read. On an asynchronous\n"
        "device (CUDA, Metal) that is the host work, the kernels being only queued; on the CPU backend they\n"
        "run inside the call.\n"
        "GFLOP/s: 2 × weights × m (each weight is a multiply and an add per token) ÷ total: where this rate\n"
        "meets the device's peak, each extra token costs its arithmetic, and t(m)/t(1) grows with m.\n"
        "kernels, bytes: the call's kernels, and the bytes they touch ÷ the weights' (tinygrad's count).")
  bandwidth, source = find_bandwidth(args.bandwidth)
  print(f"\nweights read per call: target {target_bytes / 1e9:.3f} GB")
  timings = {"one call of m = 1 (Algorithm 1's step)": 1e3 * cost[1][0]}
  print("\n".join(floor_lines(target_bytes, bandwidth, source, timings)))

def kernels(calls: list, search: int) -> str:
  """Whether the compiled calls ran searched kernels, in words."""
  if not search:
    return "kernels: tinygrad's default ones (the search is off: BEAM=0, or DEV=NULL)"
  if waiting := [c for c in calls if not c.searched]:
    return (f"kernels: tinygrad's default ones in {len(waiting)} compiled calls, not searched yet on this "
            "machine (--search searches them first, untimed)")
  return "kernels: searched (tinygrad's BEAM search, cached on this machine)"

def print_report(args: argparse.Namespace, rows: list[dict], sizes: tuple[int, int], sampling: Sampling,
                 prompts: list[list[int]], source: str, load: tuple[float, float]) -> None:
  """The table mode's output: what ran where, the bytes read per token, the table and what explains it."""
  lengths = ", ".join(str(n) for n in sorted({len(p) for p in prompts}))
  print(f"\ndevice {machine()}\n{describe(args)}\n{setting(sampling)}; {len(prompts)} prompts of {lengths} "
        f"tokens ({source}) × {args.max_new_tokens} new tokens, seeds 0..{len(prompts) - 1}\n"
        f"load average {load[0]:.1f} before, {load[1]:.1f} after")
  print(textwrap.fill(bytes_line(rows, *sizes), 110) + "\n")
  print(table(rows))
  print("\n" + textwrap.fill(LEGEND, 110))
  print("\n" + textwrap.fill(at_real_alpha(rows, sampling), 110))

def print_floor(args: argparse.Namespace, rows: list[dict], target_bytes: int) -> float | None:
  """Algorithm 1 and Algorithm 2 per token against the memory-bandwidth floor; the bandwidth (bytes/s)."""
  bandwidth, source = find_bandwidth(args.bandwidth)
  timings = {"Algorithm 1 per token": statistics.mean(r["alg1_ms_per_token"] for r in rows),
             "t(1), Algorithm 1's call timed apart": statistics.mean(r["t1_ms"] for r in rows)}
  timings |= {f"a target step of K+1 = {r['K'] + 1} rows, alone": r["target_step_ms"] for r in rows}
  timings |= {f"Algorithm 2 per token, K={r['K']}": r["alg2_ms_per_token"] for r in rows}
  print("\n" + "\n".join(floor_lines(target_bytes, bandwidth, source, timings)))
  return bandwidth

def run_table(args: argparse.Namespace, Ks: list[int], sampling: Sampling) -> None:
  """The table mode: Algorithm 1 against Algorithm 2 per K, the floor, the JSON results, and the plots."""
  _, target, draft = load_models(args, tokenizer=False)  # the draft first: the smaller
  prompts, source = prompt_set(args, target.config.vocab_size)
  sizes = model_bytes(target), sum(model_bytes(m) for m in draft.models)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  load_before = os.getloadavg()[0]
  bar = tqdm(total=len(Ks) * len(prompts), desc="runs (K values × prompts)")
  rows = [summarize(K, run_pairs(target, draft, prompts, args.max_new_tokens, K, sampling, bar, args.search))
          for K in Ks]
  bar.update(close=True)
  load = (load_before, os.getloadavg()[0])
  print_report(args, rows, sizes, sampling, prompts, source, load)
  print(kernels(calls(target, *draft.models), beam_of(target)))
  costs = step_costs(target, draft, Ks, sampling)
  print(textwrap.fill(costs_line(costs), 110))
  bandwidth = print_floor(args, rows, sizes[0])
  results = {"device": machine(), "target": args.target, "draft": args.draft, "random_weights": args.random,
             "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
             "prompts": prompts, "max_new_tokens": args.max_new_tokens,
             "load_average": load, "target_bytes": sizes[0], "draft_bytes": sizes[1], "bandwidth": bandwidth,
             "rows": rows, "step_costs": costs}
  tag = "greedy" if sampling.temperature == 0 else f"t{sampling.temperature:g}"
  if args.sweep:
    header = f"{describe(args)}; {setting(sampling)}; {Device.DEFAULT}"
    print("plots:", *plot(rows, header, args.max_new_tokens, out, tag))
  if args.vs_hf:
    results["vs_hf"] = compare_with_hf(args, target, draft, prompts)
  json_path = out / f"{tag}.json"
  json_path.write_text(json.dumps(results, indent=1))
  print("results:", json_path)

def compare_with_hf(args: argparse.Namespace, target: GPT2, draft: Draft,
                    prompts: list[list[int]]) -> dict:
  """--vs-hf: the same checkpoints (random weights saved as one) through transformers; print the ratio."""
  with tempfile.TemporaryDirectory() as tmp:
    if args.random:
      folders = (str(save_model(target, pathlib.Path(tmp) / "target")),
                 str(save_model(draft.models[0], pathlib.Path(tmp) / "draft")))
    else:
      folders = (str(checkpoint_dir(args.target)), str(checkpoint_dir(args.draft)))
    hf = vs_hf(target, draft, folders, prompts, args.max_new_tokens, args.lookahead)
  print(f"\nvs Hugging Face assisted generation (greedy, K={args.lookahead}, same checkpoints): "
        f"{hf['ours_tokens_per_second']:.1f} tokens/s here, "
        f"{hf['hf_tokens_per_second']:.1f} with transformers "
        f"({hf['torch_threads']} torch threads; OMP_NUM_THREADS sets them): ratio {hf['ratio']:.2f}; "
        f"same tokens on {hf['same_tokens']} of {len(prompts)} prompts")
  return hf

def run(args: argparse.Namespace) -> None:
  """Check the settings, then run --scoring or the table."""
  Ks = parse_sweep(args)
  sampling = open_bench(args, Ks)
  if args.scoring:
    run_scoring(args, sampling)
  else:
    run_table(args, Ks, sampling)

if __name__ == "__main__":
  sys.exit(main(run, parse_args()))
