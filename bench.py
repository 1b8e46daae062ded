"""Measure speculative sampling's speedup the way Chen et al. (2023) do: their Table 1 and Figure 1 on your machine.

    python bench.py --target gpt2-xl --draft gpt2                          # the table for K = 4
    python bench.py --target gpt2-xl --draft gpt2 --sweep 1,2,3,4,5,6      # the table per K, and Figure 1 as PNGs
    python bench.py --random --target gpt2 --draft 2,4,256 --greedy        # random weights, real shapes (no download)
    python bench.py --random --target gpt2 --scoring                       # what scoring K+1 tokens costs against 1
    python bench.py --target ckpt/big --draft ckpt/small --vs-hf           # against Hugging Face assisted generation

Method: after a warm-up that compiles every kernel, each prompt is continued by Algorithm 1 and then by Algorithm 2
with the same seed, prompt by prompt, so that a change of load on the machine touches both alike. Every run makes
exactly --max-new-tokens tokens (no stop at <|endoftext|>); its time includes the prompt's prefill, as a user waits
for it. The table pools the prompts; the plots show their mean and standard deviation. Set the device with DEV=...
"""
from __future__ import annotations
import argparse, json, os, pathlib, platform, statistics, sys, tempfile, time
from dataclasses import asdict, fields
import numpy as np
from tinygrad import Device, Tensor
from tinygrad.helpers import tqdm
from tinygrad.nn.state import get_parameters, get_state_dict, safe_save
from gpt2 import GPT2, GPT2Config, PRESETS
from speculative import Stats, autoregressive_sample, check_settings, expected_tokens_per_loop, main, next_probs, predicted_speedup, speculative_sample
from weights import CONV1D, LoadError, checkpoint_dir, load_model, load_tokenizer

SHARED_TOKENIZER = pathlib.Path(__file__).resolve().parent.parent / "shared" / "gpt2-tokenizer"
PROMPT_LEN = 8  # every prompt is cut to this many tokens: all runs then compile and replay the same kernels
PROMPTS = ["Alan Turing theorized that computers would one day become the most powerful machines on the planet.",
           "The capital of France is a city of art, fashion and food, and its museums draw millions of visitors.",
           "In the beginning of the twentieth century, physicists found that light behaves both as a wave and a particle.",
           "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)",
           "Once upon a time, in a small village at the edge of a dark forest, there lived an old woodcutter.",
           "The stock market fell sharply on Monday as investors worried about rising interest rates and inflation.",
           "To make a good cup of coffee, start with freshly roasted beans and grind them just before brewing.",
           "The mitochondria is the powerhouse of the cell, turning nutrients into the energy that the cell needs."]

# ***** models and prompts *****

def random_model(spec: str) -> GPT2:
  """A GPT-2 with random weights: a preset's shape (gpt2, gpt2-medium, ...) or "n_layer,n_head,n_embd" (GPT-2's vocabulary and context)."""
  if spec in PRESETS: cfg = PRESETS[spec]
  else:
    try: n_layer, n_head, n_embd = (int(s) for s in spec.split(","))
    except ValueError: raise ValueError(f"'{spec}' is neither a preset ({', '.join(PRESETS)}) nor a shape n_layer,n_head,n_embd such as 2,4,256.") from None
    if n_embd % n_head: raise ValueError(f"In the shape {spec}, n_embd {n_embd} is not a multiple of n_head {n_head}.")
    cfg = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd)
  model = GPT2(cfg)
  Tensor.realize(*get_parameters(model))  # compute the random init once; left lazy, every forward pass would redo it
  return model

def save_checkpoint(model: GPT2, folder: pathlib.Path) -> pathlib.Path:
  """Write a model in Hugging Face layout (config.json, model.safetensors): the inverse of weights.load_model."""
  cfg = model.config
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": cfg.n_layer,
    "n_head": cfg.n_head, "n_embd": cfg.n_embd, "vocab_size": cfg.vocab_size, "n_positions": cfg.n_ctx, "layer_norm_epsilon": cfg.norm_eps}))
  state = {k: (v.T if k.endswith(CONV1D) else v).contiguous() for k, v in get_state_dict(model).items() if not k.endswith("cache_kv")}
  safe_save(state, str(folder / "model.safetensors"))
  return folder

def prompt_set(n: int, vocab_size: int, tokenizer: str | None) -> tuple[list[list[int]], str]:
  """n prompts of PROMPT_LEN tokens: from the GPT-2 tokenizer where one loads and the model has its vocabulary, else fixed ids."""
  if vocab_size == 50257:
    folders = [tokenizer] if tokenizer else ([str(SHARED_TOKENIZER)] if SHARED_TOKENIZER.is_dir() else []) + [None]  # None: tiktoken's
    for folder in folders:
      try: enc = load_tokenizer(folder)
      except LoadError: continue
      return [enc.encode(PROMPTS[i % len(PROMPTS)])[:PROMPT_LEN] for i in range(n)], "GPT-2 tokenizer"
  rng = np.random.default_rng(0)
  return [rng.integers(0, vocab_size, PROMPT_LEN).tolist() for _ in range(n)], "fixed random token ids"

def machine() -> str:
  """The tinygrad device and, on the host, the CPU model and its core count."""
  cpu = platform.processor() or platform.machine()
  if os.path.exists("/proc/cpuinfo"):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), cpu)
  return f"{Device.DEFAULT} (host: {cpu}, {os.cpu_count()} cores)"

# ***** measuring *****

def total(stats: list[Stats]) -> Stats:
  """The Stats of several runs pooled: counts and times added."""
  return Stats(*(sum(getattr(s, f.name) for s in stats) for f in fields(Stats)))

def measure_k(target: GPT2, draft: GPT2, prompts: list[list[int]], n_tokens: int, K: int, temperature: float,
              bar: tqdm) -> dict:
  """Warm up, then run Algorithm 1 and Algorithm 2 on every prompt; one row of the table with its per-prompt figures."""
  def pair(prompt: list[int], seed: int, n: int) -> tuple[Stats, Stats]:
    base = autoregressive_sample(target, prompt, n, temperature=temperature, seed=seed, eos=None)[1]
    return base, speculative_sample(target, draft, prompt, n, K=K, temperature=temperature, seed=seed, eos=None)[2]
  # two short runs per length: a TinyJit compiles on its first call and captures on its second, then replays
  for seed in range(2): pair(prompts[0], seed, 3 * (K + 1))
  runs = []
  for seed, prompt in enumerate(prompts):
    runs.append(pair(prompt, seed, n_tokens))
    bar.update(1)
  base, spec = total([b for b, _ in runs]), total([s for _, s in runs])
  alpha, c = spec.acceptance_rate, spec.cost_ratio
  speedup, predicted = spec.tokens_per_second / base.tokens_per_second, predicted_speedup(alpha, K, c)
  per_loop = [(s.total_time / s.target_calls, s.draft_time / s.target_calls, s.target_time / s.target_calls) for _, s in runs]
  return {"K": K, "alg1_ms_per_token": 1e3 / base.tokens_per_second, "alg2_ms_per_token": 1e3 / spec.tokens_per_second,
          "speedup": speedup, "alpha": alpha, "tokens_per_target_call": spec.tokens_per_target_call, "c": c,
          # what one target call of K+1 tokens costs against one of a single token: the paper assumes about 1
          "scoring_ratio": spec.target_call_time / base.target_call_time,
          "predicted": predicted, "measured_over_predicted": speedup / predicted,
          "outside_calls_share": 1 - (spec.target_time + spec.draft_time) / spec.total_time,  # draws, accept/reject, bookkeeping
          "alg1_seconds": [b.total_time for b, _ in runs], "alg2_seconds": [s.total_time for _, s in runs],
          "tokens_per_loop": [s.tokens_per_target_call for _, s in runs], "loop_seconds": [l[0] for l in per_loop],
          "draft_seconds_per_loop": [l[1] for l in per_loop], "target_seconds_per_loop": [l[2] for l in per_loop],
          "alg1": asdict(base), "alg2": asdict(spec)}

def scoring_cost(model: GPT2, lengths: range, reps: int, temperature: float) -> dict[int, float]:
  """Median seconds of one target call (forward pass, probabilities, copy to the host) for T tokens, taking the T in turn."""
  settings, times = (temperature, 0, 1.0), {T: [] for T in lengths}
  next_probs(model, list(range(PROMPT_LEN)), 0, 1, settings)
  for r in tqdm(range(reps + 2), desc="scoring"):
    for T in lengths:
      start = time.perf_counter()
      next_probs(model, [0] * T, PROMPT_LEN + r, T, settings)
      if r >= 2: times[T].append(time.perf_counter() - start)  # the first two calls of a length compile and capture its JIT
  return {T: statistics.median(v) for T, v in times.items()}

# ***** Hugging Face assisted generation, side by side *****

def vs_hf(target: GPT2, draft: GPT2, folders: tuple[str, str], prompts: list[list[int]], n_tokens: int, K: int) -> dict:
  """Greedy, same K: tokens/s of Algorithm 2 here and of transformers' assisted generation on the same checkpoints."""
  try: import torch, transformers
  except ImportError: raise ValueError("--vs-hf needs transformers and torch: pip install -r requirements-dev.txt") from None
  transformers.logging.set_verbosity_error(); transformers.logging.disable_progress_bar()  # keep the table readable
  hf_target, hf_draft = (transformers.GPT2LMHeadModel.from_pretrained(f).eval() for f in folders)
  hf_draft.generation_config.num_assistant_tokens_schedule = "constant"  # keep K fixed, as here
  hf_draft.generation_config.assistant_confidence_threshold = 0.0         # and draft all K, whatever the draft's confidence
  def hf(prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
      out = hf_target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=hf_draft, num_assistant_tokens=K,
                               do_sample=False, max_new_tokens=n_tokens, min_new_tokens=n_tokens, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()
  def ours(prompt: list[int]) -> list[int]: return speculative_sample(target, draft, prompt, n_tokens, K=K, temperature=0, eos=None)[0]
  result = {}
  for name, fn in (("hf", hf), ("ours", ours)):
    fn(prompts[0]); fn(prompts[1 % len(prompts)])  # warm-up
    start = time.perf_counter()
    result[name + "_tokens"] = [fn(p) for p in prompts]
    result[name + "_tokens_per_second"] = n_tokens * len(prompts) / (time.perf_counter() - start)
  result["ratio"], result["torch_threads"] = result["ours_tokens_per_second"] / result["hf_tokens_per_second"], torch.get_num_threads()
  result["same_tokens"] = sum(a == b for a, b in zip(result["hf_tokens"], result["ours_tokens"]))
  return result

# ***** output *****

def table(rows: list[dict]) -> str:
  """The paper's Table 1 columns, one row per K, and the columns that explain measured / predicted."""
  lines = ["  K  Alg1 ms/tok  Alg2 ms/tok  speedup     α̂  tok/call      c  t(K+1)/t(1)  predicted  meas/pred  outside calls"]
  for r in rows:
    lines.append(f"{r['K']:>3}  {r['alg1_ms_per_token']:>11.1f}  {r['alg2_ms_per_token']:>11.1f}  {r['speedup']:>6.2f}x  {r['alpha']:>5.2f}"
                 f"  {r['tokens_per_target_call']:>8.2f}  {r['c']:>5.3f}  {r['scoring_ratio']:>11.2f}  {r['predicted']:>8.2f}x"
                 f"  {r['measured_over_predicted']:>9.2f}  {100 * r['outside_calls_share']:>12.1f}%")
  return "\n".join(lines)

def plot(rows: list[dict], header: str, n_tokens: int, out: pathlib.Path, tag: str) -> list[pathlib.Path]:
  """The paper's Figure 1, one PNG per panel: time to generate n_tokens, tokens per loop / (K+1), and time per loop, against K."""
  try:
    import matplotlib
    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt
  except ImportError: raise ValueError("--sweep draws its plots with matplotlib: pip install matplotlib") from None
  Ks = [r["K"] for r in rows]
  def errorbar(ax, key: str, label: str, scale: float = 1.0) -> None:  # mean ± sd over prompts, per K
    ax.errorbar(Ks, [scale * np.mean(r[key]) for r in rows], [scale * np.std(r[key]) for r in rows], marker="o", capsize=3, label=label)
  def save(fig, ax, title: str, ylabel: str, name: str) -> pathlib.Path:
    ax.set_title(f"{title}\n{header}", fontsize=9)
    ax.set_xlabel("K (draft tokens per loop)"); ax.set_ylabel(ylabel); ax.set_xticks(Ks); ax.grid(alpha=0.3); ax.legend(fontsize=8)
    fig.tight_layout(); fig.savefig(path := out / f"{tag}-{name}.png", dpi=100); plt.close(fig)
    return path

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  errorbar(ax, "alg2_seconds", "Algorithm 2 (speculative)")
  base = [t for r in rows for t in r["alg1_seconds"]]  # Algorithm 1 does not depend on K: all its runs pooled
  ax.axhline(np.mean(base), color="grey", ls="--", label="Algorithm 1 (auto-regressive), ± sd shaded")
  ax.axhspan(np.mean(base) - np.std(base), np.mean(base) + np.std(base), color="grey", alpha=0.15)
  paths = [save(fig, ax, f"Time to generate {n_tokens} tokens", "seconds (mean ± sd over prompts)", "time")]

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  ax.errorbar(Ks, [np.mean(r["tokens_per_loop"]) / (r["K"] + 1) for r in rows], [np.std(r["tokens_per_loop"]) / (r["K"] + 1) for r in rows],
              marker="o", capsize=3, label="measured")
  ax.plot(Ks, [expected_tokens_per_loop(r["alpha"], r["K"]) / (r["K"] + 1) for r in rows], "k--", label="expected from α̂: (1 − α̂^(K+1)) / ((1 − α̂)(K + 1))")
  paths.append(save(fig, ax, "Tokens per loop / (K + 1)", "mean tokens per target call / (K + 1)", "accepted"))

  fig, ax = plt.subplots(figsize=(6.4, 4.6))
  for key, label in (("loop_seconds", "whole loop"), ("target_seconds_per_loop", "target call (K + 1 tokens)"), ("draft_seconds_per_loop", "K draft calls")):
    errorbar(ax, key, label, scale=1e3)
  paths.append(save(fig, ax, "Time per loop", "milliseconds (mean ± sd over prompts)", "loop"))
  return paths

# ***** command line *****

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 1)[1])
  ap.add_argument("--target", default="gpt2-xl", help="target model q: gpt2, gpt2-medium, gpt2-large, gpt2-xl or a checkpoint folder")
  ap.add_argument("--draft", default="gpt2", help="draft model p, as for --target")
  ap.add_argument("--random", action="store_true", help="random weights with the shapes of --target and --draft (a preset, or n_layer,n_head,n_embd); α̂ is then not GPT-2's")
  ap.add_argument("-K", "--lookahead", type=int, default=4, help="draft tokens per loop (default 4)")
  ap.add_argument("--sweep", help="comma-separated K values: one row each, and Figure 1 as PNGs")
  ap.add_argument("--max-new-tokens", type=int, default=64, help="tokens per prompt (default 64; the paper used 128)")
  ap.add_argument("--prompts", type=int, default=4, help=f"how many prompts (default 4), each cut to {PROMPT_LEN} tokens; prompt i uses seed i")
  ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
  ap.add_argument("--greedy", action="store_true", help="temperature 0: the argmax at every step")
  ap.add_argument("--scoring", action="store_true", help="only time one target call of T = 1..8 tokens, against T = 1")
  ap.add_argument("--vs-hf", action="store_true", help="also run transformers' assisted generation (greedy, K from -K) and print the tokens/s ratio")
  ap.add_argument("--tokenizer", help=f"folder with GPT-2's encoder.json and vocab.bpe (default: {SHARED_TOKENIZER} if present, else tiktoken's)")
  ap.add_argument("--out", default="bench_out", help="folder for the JSON results and PNG plots (default bench_out)")
  return ap.parse_args(argv)

def run(args: argparse.Namespace) -> None:
  temperature = 0.0 if args.greedy else args.temperature
  Ks = [int(k) for k in args.sweep.split(",")] if args.sweep else [args.lookahead]
  for K in Ks: check_settings(args.max_new_tokens, K, temperature, 0, 1.0)
  if args.prompts < 1: raise ValueError(f"--prompts is {args.prompts}: it must be at least 1.")
  target, draft = (random_model(m) if args.random else load_model(m) for m in (args.target, args.draft))
  kind = " (random weights: the costs are real, α̂ is not GPT-2's)" if args.random else ""
  if args.scoring:
    cost = scoring_cost(target, range(1, 9), 7, temperature)
    print(f"device {machine()}, target {args.target}{kind}: one call of T tokens, median of 7, against T = 1 ({1e3 * cost[1]:.1f} ms)")
    print("  ".join(f"T={T} {cost[T] / cost[1]:.2f}x" for T in cost))
    return
  prompts, source = prompt_set(args.prompts, target.config.vocab_size, args.tokenizer)
  out = pathlib.Path(args.out); out.mkdir(parents=True, exist_ok=True)
  tag = "greedy" if temperature == 0 else f"t{temperature:g}"
  setting = "greedy" if temperature == 0 else f"temperature {temperature:g}"
  header = f"target {args.target}, draft {args.draft}{' (random weights)' if args.random else ''}; {setting}; {Device.DEFAULT}"
  load = os.getloadavg()
  bar = tqdm(total=len(Ks) * len(prompts), desc="prompts")
  rows = [measure_k(target, draft, prompts, args.max_new_tokens, K, temperature, bar) for K in Ks]
  bar.update(close=True)
  print(f"\ndevice {machine()}\ntarget {args.target}, draft {args.draft}{kind}\n{setting}; {len(prompts)} prompts of {PROMPT_LEN} tokens "
        f"({source}) × {args.max_new_tokens} new tokens, seeds 0..{len(prompts) - 1}; load average {load[0]:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after\n")
  print(table(rows))
  print("\npredicted: (1 − α̂^(K+1)) / ((1 − α̂)(Kc + 1)) from the measured α̂ and c. t(K+1)/t(1): Algorithm 2's mean target call against "
        "Algorithm 1's (the paper assumes about 1; a run's first call also reads the prompt). outside calls: Algorithm 2's time outside "
        "the models' calls (next_probs), in the draws, the accept/reject test and the bookkeeping.")
  results = {"device": machine(), "target": args.target, "draft": args.draft, "random_weights": args.random, "temperature": temperature,
             "prompts": prompts, "max_new_tokens": args.max_new_tokens, "load_average": [load, os.getloadavg()], "rows": rows}
  if args.sweep: print("plots:", *plot(rows, header, args.max_new_tokens, out, tag))
  if args.vs_hf:
    with tempfile.TemporaryDirectory() as tmp:  # random weights go to transformers through a checkpoint folder, as real ones do
      folders = ((str(save_checkpoint(target, pathlib.Path(tmp) / "target")), str(save_checkpoint(draft, pathlib.Path(tmp) / "draft")))
                 if args.random else (str(checkpoint_dir(args.target)), str(checkpoint_dir(args.draft))))
      results["vs_hf"] = hf = vs_hf(target, draft, folders, prompts, args.max_new_tokens, args.lookahead)
    print(f"\nvs Hugging Face assisted generation (greedy, K={args.lookahead}, same checkpoints): {hf['ours_tokens_per_second']:.1f} tokens/s here, "
          f"{hf['hf_tokens_per_second']:.1f} with transformers ({hf['torch_threads']} torch threads; OMP_NUM_THREADS sets them): ratio {hf['ratio']:.2f}; "
          f"same tokens on {hf['same_tokens']} of {len(prompts)} prompts")
  (json_path := out / f"{tag}.json").write_text(json.dumps(results, indent=1))
  print("results:", json_path)

if __name__ == "__main__":
  sys.exit(main(run, parse_args()))
