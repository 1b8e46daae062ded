"""Measure speculative sampling's speedup the way Chen et al. (2023) do: their Table 1 and Figure 1 on your machine.

    python bench.py --target gpt2-xl --draft gpt2                          # the table for K = 4
    python bench.py --target gpt2-xl --draft gpt2 --sweep 1,2,3,4,5,6      # the table per K, and Figure 1 as PNGs
    python bench.py --random --target gpt2 --draft 2,4,256 --greedy        # random weights, real shapes (no download)
    python bench.py --random --target gpt2 --scoring                       # one call of T tokens: host, device, t(T)/t(1)
    python bench.py --random --target gpt2 --draft ngram --greedy --prompt "..."   # prompt lookup on your own prompt
    python bench.py --target ckpt/big --draft ckpt/small --vs-hf           # against Hugging Face assisted generation
    DEV=NULL NULL_ALLOW_COPYOUT=1 python bench.py --random --target gpt2-xl --draft gpt2 --scoring   # host work only

Method: after a warm-up that compiles every kernel, each prompt is continued by Algorithm 1 and then by Algorithm 2
with the same seed, prompt by prompt, so that a change of load on the machine touches both alike. Every run makes
exactly --max-new-tokens tokens (no stop at <|endoftext|>); its time includes the prompt's prefill, as a user waits
for it. The table pools the prompts; the plots show their mean and standard deviation. Set the device with DEV=...
On DEV=NULL (tinygrad's device that runs no kernel; results read back as zeros) every time is host work.
"""
from __future__ import annotations
import argparse, json, os, pathlib, platform, statistics, sys, tempfile, time
from dataclasses import asdict, fields
import numpy as np
from tinygrad import Device, Tensor, TinyJit, dtypes
from tinygrad.helpers import tqdm
from tinygrad.nn.state import get_parameters
from cli import main, warm_up
from gpt2 import GPT2
from sampling import Sampling
from speculative import NgramDraft, Stats, autoregressive_sample, expected_tokens_per_loop, predicted_speedup
from speculative import speculative_sample
from weights import LoadError, checkpoint_dir, load_model, load_tokenizer, random_model, save_model

SHARED_TOKENIZER = pathlib.Path(__file__).resolve().parent.parent / "shared" / "gpt2-tokenizer"
PROMPT_LEN = 8  # every built-in prompt is cut to this many tokens: all runs then compile and replay the same kernels
PROMPTS = ["Alan Turing theorized that computers would one day become the most powerful machines on the planet.",
           "The capital of France is a city of art, fashion and food, and its museums draw millions of visitors.",
           "In the beginning of the twentieth century, physicists found that light behaves both as a wave and a particle.",
           "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)",
           "Once upon a time, in a small village at the edge of a dark forest, there lived an old woodcutter.",
           "The stock market fell sharply on Monday as investors worried about rising interest rates and inflation.",
           "To make a good cup of coffee, start with freshly roasted beans and grind them just before brewing.",
           "The mitochondria is the powerhouse of the cell, turning nutrients into the energy that the cell needs."]
ALPHA_REAL = 0.8  # the acceptance rate expected of real GPT-2 pairs, for the prediction printed beside the measured one

# ***** models and prompts *****

def load_models(args: argparse.Namespace) -> tuple[GPT2, GPT2 | NgramDraft]:
  """The target and the draft named on the command line: checkpoints, random weights, or prompt lookup."""
  def model(name: str, seed: int) -> GPT2:
    return random_model(name, seed=seed) if args.random else load_model(name)
  return model(args.target, 0), NgramDraft(args.ngram_max) if args.draft == "ngram" else model(args.draft, 1)

def prompt_set(args: argparse.Namespace, vocab_size: int) -> tuple[list[list[int]], str]:
  """--prompts prompts: --prompt whole, or the built-in ones cut to PROMPT_LEN tokens (fixed ids without a tokenizer)."""
  if vocab_size == 50257:
    folders = [args.tokenizer] if args.tokenizer else [str(SHARED_TOKENIZER)] * SHARED_TOKENIZER.is_dir() + [None]
    for folder in folders:  # None: tiktoken's own download and cache
      try:
        enc = load_tokenizer(folder)
      except LoadError:
        continue
      if args.prompt:
        return [enc.encode(args.prompt)] * args.prompts, "your prompt, GPT-2 tokenizer"
      return [enc.encode(PROMPTS[i % len(PROMPTS)])[:PROMPT_LEN] for i in range(args.prompts)], "GPT-2 tokenizer"
  if args.prompt:
    raise ValueError("--prompt needs the GPT-2 tokenizer and a model with its 50257-token vocabulary.")
  rng = np.random.default_rng(0)
  return [rng.integers(0, vocab_size, PROMPT_LEN).tolist() for _ in range(args.prompts)], "fixed random token ids"

def machine() -> str:
  """The tinygrad device and, on the host, the CPU model and its core count."""
  cpu = platform.processor() or platform.machine()
  if os.path.exists("/proc/cpuinfo"):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), cpu)
  return f"{Device.DEFAULT} (host: {cpu}, {os.cpu_count()} cores)"

# ***** measuring *****

def total(stats: list[Stats]) -> Stats:
  """The Stats of several runs pooled: counts and times added."""
  return Stats(**{f.name: sum(getattr(s, f.name) for s in stats) for f in fields(Stats) if f.name != "stopped_by"})

def measure_k(target: GPT2, draft: GPT2 | NgramDraft, prompts: list[list[int]], n_tokens: int, K: int,
              sampling: Sampling, bar: tqdm) -> dict:
  """Warm up, then run Algorithm 1 and Algorithm 2 on every prompt; one row of the table with its per-prompt figures."""
  settings = dict(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p, eos=None)
  def pair(prompt: list[int], seed: int, n: int) -> tuple[Stats, Stats]:
    base = autoregressive_sample(target, prompt, n, seed=seed, **settings)[1]
    return base, speculative_sample(target, draft, prompt, n, K=K, seed=seed, **settings)[2]
  warm_up(target, draft, K, sampling)
  for seed in range(2):  # and the shapes of a first round, which also reads the prompt: each compiles, then captures
    pair(prompts[0], seed, 3 * (K + 1))
  runs = []
  for seed, prompt in enumerate(prompts):
    runs.append(pair(prompt, seed, n_tokens))
    bar.update(1)
  base, spec = total([b for b, _ in runs]), total([s for _, s in runs])
  alpha, c, k = spec.acceptance_rate, spec.cost_ratio, spec.mean_drafted
  speedup, predicted = spec.tokens_per_second / base.tokens_per_second, predicted_speedup(alpha, k, c)
  rounds = [(s.total_time, s.draft_time, s.target_time, s.target_calls) for _, s in runs]
  return {"K": K, "alg1_ms_per_token": 1e3 / base.tokens_per_second, "alg2_ms_per_token": 1e3 / spec.tokens_per_second,
          "speedup": speedup, "alpha": alpha, "tokens_per_target_call": spec.tokens_per_target_call, "c": c,
          "mean_drafted": k,
          # what one target call of K+1 tokens costs against one of a single token: the paper assumes about 1
          "scoring_ratio": spec.target_call_time / base.target_call_time,
          "predicted": predicted, "measured_over_predicted": speedup / predicted,
          "predicted_at_real_alpha": predicted_speedup(ALPHA_REAL, K, c),
          "ms_per_round": 1e3 * spec.total_time / spec.target_calls,
          # the draws, the accept/reject test and the bookkeeping: the time outside the models' calls
          "outside_calls_share": 1 - (spec.target_time + spec.draft_time) / spec.total_time,
          "alg1_seconds": [b.total_time for b, _ in runs], "alg2_seconds": [s.total_time for _, s in runs],
          "tokens_per_loop": [s.tokens_per_target_call for _, s in runs],
          "loop_seconds": [t / n for t, _, _, n in rounds], "draft_seconds_per_loop": [d / n for _, d, _, n in rounds],
          "target_seconds_per_loop": [t / n for _, _, t, n in rounds], "alg1": asdict(base), "alg2": asdict(spec)}

def scoring_cost(model: GPT2, lengths: range, reps: int, sampling: Sampling) -> dict[int, tuple[float, float]]:
  """Per T: median seconds of one call of T tokens with its probabilities copied to the host, and of its host part.

  The host part is the time until model(...) returns. On an asynchronous device (CUDA, Metal) that is when the
  kernels are queued, so the rest, until the copy arrives, is the device's; the CPU backend runs the kernels
  inside the call, so there both times include them.
  """
  times: dict[int, list[tuple[float, float]]] = {T: [] for T in lengths}
  for r in tqdm(range(reps + 2), desc="scoring"):
    for T in lengths:
      start = time.perf_counter()
      out = model([0] * T, PROMPT_LEN + r, last=T, head=sampling)
      launched = time.perf_counter()
      out.numpy()
      if r >= 2:  # the first two calls of a length compile and capture its compiled step
        times[T].append((time.perf_counter() - start, launched - start))
  return {T: (statistics.median(t for t, _ in v), statistics.median(h for _, h in v)) for T, v in times.items()}

def model_bytes(model: GPT2) -> int:
  """The bytes of the model's weights: what one decoding step must read at least once (the KV caches aside)."""
  caches = {id(block.attn.cache_kv) for block in model.h}
  return sum(p.nbytes() for p in get_parameters(model) if id(p) not in caches)

def measure_bandwidth(nbytes: int = 1 << 30) -> float:
  """Bytes per second the device reads: the best of 5 sums over a buffer of nbytes, each reading it once."""
  x = Tensor.empty(nbytes // 4, dtype=dtypes.float32).contiguous().realize()
  read = TinyJit(lambda: x.sum().contiguous())
  times = []
  for _ in range(7):
    Device[Device.DEFAULT].synchronize()
    start = time.perf_counter()
    read()
    Device[Device.DEFAULT].synchronize()
    times.append(time.perf_counter() - start)
  return nbytes / min(times[2:])  # the first two calls compile and capture

# ***** Hugging Face assisted generation, side by side *****

def vs_hf(target: GPT2, draft: GPT2, folders: tuple[str, str], prompts: list[list[int]], n_tokens: int, K: int) -> dict:
  """Greedy, same K: tokens/s of Algorithm 2 here and of transformers' assisted generation on the same checkpoints."""
  try:
    import torch, transformers
  except ImportError:
    raise ValueError("--vs-hf needs transformers and torch: see requirements-hf.txt.") from None
  transformers.logging.set_verbosity_error()  # keep the table readable
  transformers.logging.disable_progress_bar()
  hf_target, hf_draft = (transformers.GPT2LMHeadModel.from_pretrained(f).eval() for f in folders)
  hf_draft.generation_config.num_assistant_tokens_schedule = "constant"  # keep K fixed, as here
  hf_draft.generation_config.assistant_confidence_threshold = 0.0         # and draft all K, whatever the confidence
  def hf(prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
      out = hf_target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=hf_draft,
                               num_assistant_tokens=K, do_sample=False, max_new_tokens=n_tokens,
                               min_new_tokens=n_tokens, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()
  def ours(prompt: list[int]) -> list[int]:
    return speculative_sample(target, draft, prompt, n_tokens, K=K, temperature=0, eos=None)[0]
  result = {}
  for name, fn in (("hf", hf), ("ours", ours)):
    for prompt in prompts[:2]:
      fn(prompt)  # warm-up
    start = time.perf_counter()
    result[name + "_tokens"] = [fn(p) for p in prompts]
    result[name + "_tokens_per_second"] = n_tokens * len(prompts) / (time.perf_counter() - start)
  result["ratio"] = result["ours_tokens_per_second"] / result["hf_tokens_per_second"]
  result["torch_threads"] = torch.get_num_threads()
  result["same_tokens"] = sum(a == b for a, b in zip(result["hf_tokens"], result["ours_tokens"]))
  return result

# ***** output *****

def table(rows: list[dict]) -> str:
  """The paper's Table 1 columns, one row per K, and the columns that explain measured / predicted."""
  lines = ["  K  Alg1 ms/tok  Alg2 ms/tok  speedup     α̂  tok/call      c  t(K+1)/t(1)  predicted  meas/pred"
           "  ms/round  outside calls"]
  for r in rows:
    lines.append(f"{r['K']:>3}  {r['alg1_ms_per_token']:>11.1f}  {r['alg2_ms_per_token']:>11.1f}  {r['speedup']:>6.2f}x"
                 f"  {r['alpha']:>5.2f}  {r['tokens_per_target_call']:>8.2f}  {r['c']:>5.3f}  {r['scoring_ratio']:>11.2f}"
                 f"  {r['predicted']:>8.2f}x  {r['measured_over_predicted']:>9.2f}  {r['ms_per_round']:>8.2f}"
                 f"  {100 * r['outside_calls_share']:>12.1f}%")
  return "\n".join(lines)

def floor_report(rows: list[dict], target_bytes: int, draft_bytes: int, bandwidth: float | None) -> str:
  """Bytes read per token, the memory-bandwidth floor, and Algorithm 1 against it."""
  lines = [f"weights: target {target_bytes / 1e9:.3f} GB, draft {draft_bytes / 1e9:.3f} GB. Bytes read per token: "
           f"Algorithm 1 {target_bytes / 1e9:.3f} GB; Algorithm 2 (K·draft + target) ÷ tokens per call: "
           + ", ".join(f"K={r['K']} {(r['K'] * draft_bytes + target_bytes) / r['tokens_per_target_call'] / 1e9:.3f} GB"
                       for r in rows)]
  if bandwidth is None:
    return lines[0] + "\n(no bandwidth on DEV=NULL: give one with --bandwidth GB/s to see the floor)"
  floor_ms = 1e3 * target_bytes / bandwidth
  alg1 = statistics.mean(r["alg1_ms_per_token"] for r in rows)
  lines.append(f"memory-bandwidth floor: {target_bytes / 1e9:.3f} GB ÷ {bandwidth / 1e9:.0f} GB/s = {floor_ms:.2f} ms/token; "
               f"Algorithm 1 takes {alg1:.2f} ms/token, {alg1 / floor_ms:.1f}x the floor "
               f"({100 * floor_ms / alg1:.0f}% of the bandwidth)")
  return "\n".join(lines)

def plot(rows: list[dict], header: str, n_tokens: int, out: pathlib.Path, tag: str) -> list[pathlib.Path]:
  """The paper's Figure 1, one PNG per panel: time to generate n_tokens, tokens per loop / (K+1), and time per
  loop, against K."""
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
    ax.set_xlabel("K (draft tokens per loop)")
    ax.set_ylabel(ylabel)
    ax.set_xticks(Ks)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path := out / f"{tag}-{name}.png", dpi=100)
    plt.close(fig)
    return path

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  errorbar(ax, "alg2_seconds", "Algorithm 2 (speculative)")
  base = [t for r in rows for t in r["alg1_seconds"]]  # Algorithm 1 does not depend on K: all its runs pooled
  ax.axhline(np.mean(base), color="grey", ls="--", label="Algorithm 1 (auto-regressive), ± sd shaded")
  ax.axhspan(np.mean(base) - np.std(base), np.mean(base) + np.std(base), color="grey", alpha=0.15)
  paths = [save(fig, ax, f"Time to generate {n_tokens} tokens", "seconds (mean ± sd over prompts)", "time")]

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  per_slot = [np.array(r["tokens_per_loop"]) / (r["K"] + 1) for r in rows]
  ax.errorbar(Ks, [s.mean() for s in per_slot], [s.std() for s in per_slot], marker="o", capsize=3, label="measured")
  ax.plot(Ks, [expected_tokens_per_loop(r["alpha"], r["K"]) / (r["K"] + 1) for r in rows], "k--",
          label="expected from α̂: (1 − α̂^(K+1)) / ((1 − α̂)(K + 1))")
  paths.append(save(fig, ax, "Tokens per loop / (K + 1)", "mean tokens per target call / (K + 1)", "accepted"))

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  for key, label in (("loop_seconds", "whole loop"), ("target_seconds_per_loop", "target call (K + 1 tokens)"),
                     ("draft_seconds_per_loop", "K draft calls")):
    errorbar(ax, key, label, scale=1e3)
  paths.append(save(fig, ax, "Time per loop", "milliseconds (mean ± sd over prompts)", "loop"))
  return paths

# ***** command line *****

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                               epilog=__doc__.split("\n", 1)[1])
  ap.add_argument("--target", default="gpt2-xl",
                  help="target model q: gpt2, gpt2-medium, gpt2-large, gpt2-xl or a checkpoint folder")
  ap.add_argument("--draft", default="gpt2", help="draft model p, as for --target; or ngram (prompt lookup)")
  ap.add_argument("--ngram-max", type=int, default=3, help="with --draft ngram: the longest n-gram to match (default 3)")
  ap.add_argument("--random", action="store_true", help="random weights with the shapes of --target and --draft "
                  "(a preset, or n_layer,n_head,n_embd); α̂ is then not GPT-2's")
  ap.add_argument("-K", "--lookahead", type=int, default=4, help="draft tokens per loop (default 4)")
  ap.add_argument("--sweep", help="comma-separated K values: one row each, and Figure 1 as PNGs")
  ap.add_argument("--max-new-tokens", type=int, default=64, help="tokens per prompt (default 64; the paper used 128)")
  ap.add_argument("--prompts", type=int, default=4,
                  help=f"how many prompts (default 4), each cut to {PROMPT_LEN} tokens; prompt i uses seed i")
  ap.add_argument("--prompt", help="your own prompt, used whole (--prompts times, seeds 0, 1, ...)")
  ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
  ap.add_argument("--greedy", action="store_true", help="temperature 0: the argmax at every step")
  ap.add_argument("--scoring", action="store_true", help="only time one target call of T = 1..8 tokens: total, host "
                  "part, and against T = 1")
  ap.add_argument("--bandwidth", type=float, help="the device's memory bandwidth in GB/s for the floor "
                  "(default: measured with one read of 1 GiB)")
  ap.add_argument("--vs-hf", action="store_true", help="also run transformers' assisted generation (greedy, K from -K)"
                  " and print the tokens/s ratio")
  ap.add_argument("--tokenizer", help="folder with GPT-2's encoder.json and vocab.bpe "
                  f"(default: {SHARED_TOKENIZER} if present, else tiktoken's)")
  ap.add_argument("--out", default="bench_out", help="folder for the JSON results and PNG plots (default bench_out)")
  return ap.parse_args(argv)

def check(args: argparse.Namespace, Ks: list[int]) -> Sampling:
  """Refuse bad settings with one sentence before any model loads; the sampling settings."""
  sampling = Sampling(0.0 if args.greedy else args.temperature)
  if min(Ks) < 1:
    raise ValueError(f"K (the lookahead) is {min(Ks)}: it must be at least 1.")
  if args.max_new_tokens < 1:
    raise ValueError(f"max-new-tokens is {args.max_new_tokens}: it must be at least 1.")
  if args.prompts < 1:
    raise ValueError(f"--prompts is {args.prompts}: it must be at least 1.")
  if args.vs_hf and args.draft == "ngram":
    raise ValueError("--vs-hf compares two models: give a draft model, not ngram.")
  return sampling

def scoring(args: argparse.Namespace, target: GPT2, sampling: Sampling, kind: str) -> None:
  cost = scoring_cost(target, range(1, 9), 7, sampling)
  print(f"device {machine()}, target {args.target}{kind}: one call of T tokens with its probabilities copied to "
        f"the host, median of 7")
  print("  T   total ms   host ms   t(T)/t(1)")
  for T, (t, host) in cost.items():
    print(f"{T:>3}  {1e3 * t:>9.3f}  {1e3 * host:>8.3f}  {t / cost[1][0]:>10.2f}")

def run(args: argparse.Namespace) -> None:
  Ks = [int(k) for k in args.sweep.split(",")] if args.sweep else [args.lookahead]
  sampling = check(args, Ks)
  target, draft = load_models(args)
  kind = " (random weights: the costs are real, α̂ is not GPT-2's)" if args.random else ""
  if args.scoring:
    return scoring(args, target, sampling, kind)
  prompts, source = prompt_set(args, target.config.vocab_size)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  tag = "greedy" if sampling.temperature == 0 else f"t{sampling.temperature:g}"
  setting = "greedy" if sampling.temperature == 0 else f"temperature {sampling.temperature:g}"
  header = f"target {args.target}, draft {args.draft}{' (random weights)' if args.random else ''}; {setting}; {Device.DEFAULT}"
  load = os.getloadavg()
  bar = tqdm(total=len(Ks) * len(prompts), desc="runs (K values × prompts)")
  rows = [measure_k(target, draft, prompts, args.max_new_tokens, K, sampling, bar) for K in Ks]
  bar.update(close=True)
  print(f"\ndevice {machine()}\ntarget {args.target}, draft {args.draft}{kind}\n{setting}; {len(prompts)} prompts of "
        f"{', '.join(str(n) for n in sorted({len(p) for p in prompts}))} tokens ({source}) × {args.max_new_tokens} new "
        f"tokens, seeds 0..{len(prompts) - 1}; load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n")
  print(table(rows))
  print("\npredicted: (1 − α̂^(K+1)) / ((1 − α̂)(Kc + 1)) from the measured α̂ and c (K: the mean drafted per call). "
        "t(K+1)/t(1): Algorithm 2's mean target call against Algorithm 1's (the paper assumes about 1; a run's first "
        "call also reads the prompt). ms/round: Algorithm 2's time per target call, drafting and draws included "
        "(on DEV=NULL: the host work of a round). outside calls: Algorithm 2's time outside the models' calls, in the "
        "draws, the accept/reject test and the bookkeeping.")
  print(f"\nat α = {ALPHA_REAL} (what real GPT-2 pairs are expected to reach), the same costs (c, and t(K+1)/t(1) as "
        "measured) predict: " + ", ".join(f"K={r['K']} {r['predicted_at_real_alpha'] / r['scoring_ratio']:.2f}x"
                                            for r in rows))
  bandwidth = args.bandwidth * 1e9 if args.bandwidth else None if Device.DEFAULT == "NULL" else measure_bandwidth()
  draft_bytes = model_bytes(draft) if isinstance(draft, GPT2) else 0
  print("\n" + floor_report(rows, model_bytes(target), draft_bytes, bandwidth))
  results = {"device": machine(), "target": args.target, "draft": args.draft, "random_weights": args.random,
             "temperature": sampling.temperature, "prompts": prompts, "max_new_tokens": args.max_new_tokens,
             "load_average": [load, os.getloadavg()], "bandwidth": bandwidth, "rows": rows}
  if args.sweep:
    print("plots:", *plot(rows, header, args.max_new_tokens, out, tag))
  if args.vs_hf:
    results["vs_hf"] = compare_with_hf(args, target, draft, prompts)
  (json_path := out / f"{tag}.json").write_text(json.dumps(results, indent=1))
  print("results:", json_path)

def compare_with_hf(args: argparse.Namespace, target: GPT2, draft: GPT2, prompts: list[list[int]]) -> dict:
  with tempfile.TemporaryDirectory() as tmp:  # random weights reach transformers as a checkpoint folder, as real ones
    if args.random:
      folders = (str(save_model(target, pathlib.Path(tmp) / "target")), str(save_model(draft, pathlib.Path(tmp) / "draft")))
    else:
      folders = (str(checkpoint_dir(args.target)), str(checkpoint_dir(args.draft)))
    hf = vs_hf(target, draft, folders, prompts, args.max_new_tokens, args.lookahead)
  print(f"\nvs Hugging Face assisted generation (greedy, K={args.lookahead}, same checkpoints): "
        f"{hf['ours_tokens_per_second']:.1f} tokens/s here, {hf['hf_tokens_per_second']:.1f} with transformers "
        f"({hf['torch_threads']} torch threads; OMP_NUM_THREADS sets them): ratio {hf['ratio']:.2f}; "
        f"same tokens on {hf['same_tokens']} of {len(prompts)} prompts")
  return hf

if __name__ == "__main__":
  sys.exit(main(run, parse_args()))
