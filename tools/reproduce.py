"""The paper's experiment on gpt2-xl drafted by gpt2 in one command: Table 1, Figure 1, Theorem 1, a greedy check.

Chen et al. (2023)'s Table 1 and Figure 1 measured on this machine, with Theorem 1 tested on the pair and a greedy
check against a published run of it.

    python -m tools.reproduce                                  # all three parts; it says how long before each
    python -m tools.reproduce --parts greedy,theorem           # the two checks alone
    python -m tools.reproduce --prompts 4 --ks 1,2,4 --max-new-tokens 32   # a shorter table

The weights come as speculative.py's do: from the cache, else downloaded (from $HF_ENDPOINT if set). The parts:

- greedy: at temperature 0 on the README's prompt, Algorithm 2's text must equal Algorithm 1's, and their
  opening is compared with a published run of the same pair (PUBLISHED).
- theorem: the paper's Theorem 1 at each sampled setting. At a few fixed prefixes x, N rounds of Algorithm 2 from
  x, and the first token each emits is compared by chi-square with the target's own q(x) after the setting's
  filters; a negative control, the same rounds with the classic mistake (after a rejection, a token drawn from q
  instead of the residual (q − p)+), must be rejected by the same test.
- table: the paper's three settings (SETTINGS) over the prompts in tools/prompts.json, K by K: first the cost
  model's prediction from a pilot run and the round's parts timed alone, then Algorithm 1 against Algorithm 2
  (tools/bench.py's method), then Table 1's rows and Figure 1's panels as PNGs.

Everything lands in a dated JSON under --out, with the machine, device, dtype and commit, and a row for the
README's results table. The exit code is 1 if a check failed (0 if all passed, 2 for bad input).
"""
from __future__ import annotations
import argparse, datetime, importlib.metadata, json, math, os, pathlib, platform, resource, subprocess, sys, time
from typing import Callable
import numpy as np
from scipy import stats as scipy_stats
from tinygrad import Device, dtypes
from tinygrad.helpers import GlobalCounters
from costs import Stats, predicted_speedup
from gpt2 import GPT2
from sampling import Sampling
from speculative import Draft, ModelDraft, autoregressive_sample, check_models, check_request, run_call
from speculative import speculative_sample
from engine.compiled import on_host_cpu, prefill, step
from tools import bench
from tools.parts import REPS, time_parts
from tools.session import check_tokenizer, heartbeat, load_models, main, open_device, setting, settle, warm_up
from tools.session import warm_up_baseline

PROMPTS = pathlib.Path(__file__).with_name("prompts.json")
# Chen et al. (2023), section 4: XSum at greedy and at nucleus top-p 0.8, HumanEval at temperature 0.8 with
# top-p 0.95; each setting continues its task's prompts (tools/prompts.json says what stands in for each task)
SETTINGS = {"xsum-greedy": (Sampling(0.0), "news"), "xsum-nucleus": (Sampling(1.0, 0, 0.8), "news"),
            "humaneval": (Sampling(0.8, 0, 0.95), "code")}
TURING = "Alan Turing theorized that computers would one day become"
# ai-glimpse/toyllm's write-up of gpt2-xl drafted by gpt2 (greedy, K = 4, 266 new tokens): both algorithms
# printed the same text, which opens with these two sentences, and 0.8125 of the drafts were accepted
PUBLISHED = (" so powerful that they would be able to think like humans.",
             " In the 1950s, he proposed a way to build a computer that could think like a human.")
PUBLISHED_TOKENS, PUBLISHED_K, PUBLISHED_ACCEPTED = 266, 4, 0.8125
PILOT_SEED = 1_000_000  # the pilot run that the prediction takes α̂ from: a seed no timed run uses
THEOREM_K = 1           # the theorem's rounds draft one token: the first emitted token's law is the same at any K
THRESHOLD = 1e-3        # each chi-square test's false-alarm rate: a correct sampler fails one with this chance
INTERVAL_DRAWS = 2000   # the bootstrap's resamples for α̂'s 95% interval

class Progress:
  """How many of a long job's steps are done and about how long the rest will take, for session.heartbeat's line
  on stderr (a line every few seconds, also in a log file); update() counts steps, as tqdm's does."""
  def __init__(self, total: int, what: str):
    self.total, self.what, self.done, self.start = total, what, 0, time.perf_counter()

  def update(self, n: int = 1) -> None:
    self.done += n

  def status(self) -> str:
    if not self.done:
      return f"{self.what}: 0 of {self.total:,} done"
    left = (time.perf_counter() - self.start) * (self.total - self.done) / self.done
    return f"{self.what}: {self.done:,} of {self.total:,} done, about {left / 60:.1f} min left"

# ***** Theorem 1 on the real pair *****
# Chen et al.'s Theorem 1, "Modified Rejection Sampling recovers the target distribution": whatever p is, the token a
# round emits after a prefix x follows q(x). Its one-step form is what a few prefixes and N rounds each can test.

def chisquare(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
  """Pearson's statistic of counts against probs, and its degrees of freedom, the least likely cells pooled
  until every bin expects >= 5. A count where probs is 0 cannot happen under probs: the statistic is then
  infinite. All the mass in one bin: (0, 0), nothing to compare."""
  if counts[probs == 0].any():
    return math.inf, 1
  observed, expected = pooled(counts, counts.sum() * probs / probs.sum(), probs)
  if len(expected) < 2:
    return 0.0, 0
  return float(((observed - expected) ** 2 / expected).sum()), len(expected) - 1

def pooled(observed: np.ndarray, expected: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """observed and expected with the least likely cells (by probs) pooled, plus the next ones until the pool
  expects >= 5."""
  order = np.argsort(probs)
  observed, expected = observed[order], expected[order]
  if (small := int((expected < 5).sum())):
    n = max(small, int(np.searchsorted(np.cumsum(expected), 5)) + 1)
    observed, expected = np.r_[observed[:n].sum(), observed[n:]], np.r_[expected[:n].sum(), expected[n:]]
  return observed, expected

def control_law(q: np.ndarray, p: np.ndarray) -> np.ndarray:
  """The negative control's law of the first token: accepted drafts, min(p, q), and after a rejection, which
  has chance 1 − β with β = Σ min(p, q), a draw from q: min(p, q) + (1 − β) q, which is q only when p = q."""
  accepted = np.minimum(p, q)
  return accepted + (1 - accepted.sum()) * q

def power(laws: list[tuple[np.ndarray, np.ndarray]], n: int) -> float:
  """The chance that the pooled test rejects, at n draws a prefix, draws from law instead of q: for each
  (q, law), the noncentral chi-square over q's bins, its noncentrality n Σ (law − q)² / q."""
  lam, dof = 0.0, 0
  for q, law in laws:
    got, want = pooled(n * law, n * q, q)
    lam, dof = lam + float(((got - want) ** 2 / want).sum()), dof + len(want) - 1
  if dof == 0:
    return 0.0
  return float(scipy_stats.ncx2.sf(scipy_stats.chi2.isf(THRESHOLD, dof), dof, lam))

def at_prefix(target: GPT2, draft: ModelDraft, x: list[int], sampling: Sampling) -> tuple[np.ndarray, np.ndarray]:
  """Feed the prefix x into both models' caches as a round expects them; q(x) and p(x) as a theorem round computes
  them: the target's step of K+1 rows from x_n, its row 0, and the draft's first step (x_{n-1} and x_n, 2 rows),
  its row 1; float64 on the host. Every round at x then rewrites the caches from there alike."""
  prefill(target, x[:-1], sampling, THEOREM_K + 1)
  draft.prefill(x, sampling, THEOREM_K + 1)
  n, V = len(x), target.config.vocab_size
  def row(model: GPT2, rows: int, start: int, ids: list[int], i: int) -> np.ndarray:
    call = step(model, rows, sampling)
    return call.to_host(call(start, *ids))[i, :V].astype(np.float64)
  return row(target, THEOREM_K + 1, n - 1, [x[-1]], 0), row(draft.model, 2, n - 2, x[-2:], 1)

def first_tokens(target: GPT2, draft: ModelDraft, x: list[int], sampling: Sampling, n: int, seed: int,
                 q: np.ndarray, bar: Progress) -> tuple[np.ndarray, np.ndarray]:
  """n rounds of Algorithm 2 at x (seed, rounds 0..n-1), each from the same caches: the counts of the first
  token each emits, and of the control's (its draw from q after a rejection made on the host, seeded)."""
  rng, V = np.random.default_rng(seed), len(q)
  call, values, _ = draft.round(target, x, THEOREM_K, THEOREM_K, sampling)
  ours, control = np.zeros(V, np.int64), np.zeros(V, np.int64)
  for i in range(n):
    out = run_call(call, [*values, seed, i, len(x) - 1], Stats())
    ours[out[0]] += 1
    control[out[0] if out[THEOREM_K + 1] else rng.choice(V, p=q / q.sum())] += 1
    bar.update(1)
  return ours, control

def theorem(target: GPT2, draft: ModelDraft, prefixes: list[list[int]], sampling: Sampling, n: int,
            bar: Progress) -> dict:
  """Theorem 1 at one setting: per prefix, n rounds' first tokens against q (after the setting's filters),
  pooled into one chi-square test (the statistics and degrees of freedom add); the control the same way."""
  result: dict = {"setting": setting(sampling), "n_per_prefix": n, "threshold": THRESHOLD, "prefixes": []}
  totals, laws = {"ours": [0.0, 0], "control": [0.0, 0]}, []
  for seed, x in enumerate(prefixes):
    q, p = at_prefix(target, draft, x, sampling)
    counts = dict(zip(("ours", "control"), first_tokens(target, draft, x, sampling, n, seed, q, bar)))
    row = {"tokens": x, "beta": float(np.minimum(p, q).sum())}
    for name, c in counts.items():
      statistic, dof = chisquare(c, q)
      row[name] = {"statistic": statistic, "dof": dof, "p_value": pvalue(statistic, dof)}
      totals[name] = [totals[name][0] + statistic, totals[name][1] + dof]
    result["prefixes"].append(row)
    laws.append((q, control_law(q, p)))
  for name, (statistic, dof) in totals.items():
    result[name] = {"statistic": statistic, "dof": dof, "p_value": pvalue(statistic, dof)}
  result["control_power"] = power(laws, n)
  result["passed"] = result["ours"]["p_value"] > THRESHOLD and result["control"]["p_value"] < THRESHOLD
  return result

def pvalue(statistic: float, dof: int) -> float:
  """The chi-square test's p-value; 1 with nothing to compare (dof 0)."""
  return float(scipy_stats.chi2.sf(statistic, dof)) if dof else 1.0

def theorem_lines(r: dict) -> list[str]:
  """A setting's Theorem 1 result in words."""
  lines = [f"Theorem 1, {r['setting']}: {len(r['prefixes'])} prefixes × N = {r['n_per_prefix']:,} rounds (K = "
           f"{THEOREM_K}), the first token each emits against the target's q; passes at p > {THRESHOLD:g}"]
  for i, row in enumerate(r["prefixes"]):
    lines.append(f"  prefix {i + 1} ({len(row['tokens'])} tokens, β = Σ min(p, q) = {row['beta']:.3f}): "
                 f"p = {row['ours']['p_value']:.3g}; control p = {row['control']['p_value']:.3g}")
  ours, control = r["ours"], r["control"]
  lines.append(f"  pooled: χ² = {ours['statistic']:.1f} on {ours['dof']} degrees of freedom, p = "
               f"{ours['p_value']:.3g}: {'passes' if ours['p_value'] > THRESHOLD else 'FAILS'}")
  lines.append(f"  control (after a rejection, a draw from q instead of (q − p)+): χ² = {control['statistic']:.1f} "
               f"on {control['dof']}, p = {control['p_value']:.3g}: "
               f"{'rejected, as it must be' if control['p_value'] < THRESHOLD else 'NOT REJECTED'} "
               f"(the test's power against it at this N: {r['control_power']:.3f})")
  return lines

# ***** the greedy check *****

def greedy_check(target: GPT2, draft: Draft, enc, n_tokens: int, published: bool) -> dict:
  """At temperature 0 on TURING: Algorithm 1's and Algorithm 2's tokens (K = PUBLISHED_K), whether they are the
  same, and how many of the published opening's sentences their text starts with (published: the pair is the
  published run's, gpt2-xl drafted by gpt2; else None, not compared)."""
  prompt, greedy = enc.encode(TURING), Sampling(0.0)
  # the prompt goes in as Algorithm 2 feeds it, K+1 rows a step: the same cache, so any difference is the rounds'
  alg1 = autoregressive_sample(target, prompt, n_tokens, sampling=greedy, eos=None, rows=PUBLISHED_K + 1)[0]
  alg2, _, spec = speculative_sample(target, draft, prompt, n_tokens, K=PUBLISHED_K, sampling=greedy, eos=None)
  text = enc.decode(alg2)
  matched = sentences_matched(text)
  shorter = min(len(alg1), len(alg2)) if len(alg1) != len(alg2) else None  # one stopped early: they differ there
  differ = next((i for i, (a, b) in enumerate(zip(alg1, alg2)) if a != b), shorter)
  return {"prompt": TURING, "new_tokens": len(alg2), "K": PUBLISHED_K, "same_tokens": alg1 == alg2,
          "first_difference": differ, "text": text, "alg1_text": enc.decode(alg1),
          "published_sentences_matched": matched if published else None,
          "accepted_over_drafted": spec.accepted / max(spec.drafted, 1), "alpha": spec.acceptance_rate,
          "passed": alg1 == alg2 and (matched >= 1 or not published)}

def sentences_matched(text: str) -> int:
  """How many of PUBLISHED's sentences text (after the prompt) opens with, in order: 0, 1 or 2. Only the opening is
  compared, as numerics (float16, another GPU's kernels) may part two correct greedy runs later."""
  matched = 0
  while matched < len(PUBLISHED) and text.startswith("".join(PUBLISHED[:matched + 1])):
    matched += 1
  return matched

def greedy_lines(r: dict) -> list[str]:
  """The greedy check in words."""
  same = ("Algorithm 2's tokens equal Algorithm 1's" if r["same_tokens"] else
          f"Algorithm 2's tokens DIFFER from Algorithm 1's from token {r['first_difference'] + 1}")
  matched = r["published_sentences_matched"]
  opening = ("its opening is not compared: the published run is gpt2-xl drafted by gpt2" if matched is None else
             f"its opening matches the published one's first {matched} of {len(PUBLISHED)} sentences" if matched
             else "its opening DIFFERS from the published one's first sentence")
  return [f"greedy check: {r['new_tokens']} tokens at temperature 0, K = {r['K']}: {same}; {opening}",
          f"  {TURING}{r['text'][:300]!r}" + "..." * (len(r["text"]) > 300),
          f"  accepted ÷ drafted {r['accepted_over_drafted']:.4f} (published: {PUBLISHED_ACCEPTED}), α̂ "
          f"{r['alpha']:.3f}"]

# ***** Table 1 and Figure 1 *****

def alpha_interval(runs: list[tuple[Stats, Stats]], seed: int = 0) -> list[float]:
  """α̂'s 95% interval: a bootstrap over the prompts (each prompt's checks resampled together, as its drafts'
  chances are alike), the percentiles of accepted ÷ checked."""
  accepted = np.array([s.accepted for _, s in runs], np.float64)
  checked = np.array([s.accepted + s.rejected for _, s in runs], np.float64)
  picks = np.random.default_rng(seed).integers(0, len(runs), (INTERVAL_DRAWS, len(runs)))
  ratios = accepted[picks].sum(1) / np.maximum(checked[picks].sum(1), 1)
  return [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))]

def prediction(target: GPT2, draft: Draft, pilot: list[int], K: int, sampling: Sampling, n_tokens: int) -> dict:
  """Before the timed runs: compile K's calls, run a pilot of Algorithm 2 on the pilot prompt (an untimed seed),
  time the round's parts and Algorithm 1's call alone, and predict from them and the pilot's α̂."""
  warm_up(target, draft, pilot, K, sampling, PILOT_SEED)
  warm_up_baseline(target, pilot, K, sampling, PILOT_SEED)
  tokens, _, pilot_stats = speculative_sample(target, draft, pilot, n_tokens, K=K, sampling=sampling,
                                              seed=PILOT_SEED, eos=None)
  time_parts(target, draft, K, sampling, pilot_stats, pilot + tokens)
  alpha, costs, t1 = pilot_stats.acceptance_rate, pilot_stats.costs, pilot_stats.token_call_time
  speedup = predicted_speedup(alpha, costs)
  return {"K": K, "pilot_alpha": alpha, "t1_ms": 1e3 * t1, "round_in_t1": costs.round,
          "speedup": speedup, "alg2_ms_per_token": 1e3 * t1 / speedup}

def estimate_seconds(predicted: list[dict], prompts: int, n_tokens: int) -> float:
  """The timed runs' seconds, from the predictions: per K and prompt, n_tokens of each algorithm, and the parts
  timed after each run (REPS replays of a round, of its parts, about a round's time, and of a token: about 3
  rounds' time a replay)."""
  return sum(prompts * 1e-3 * (n_tokens * (p["t1_ms"] + p["alg2_ms_per_token"]) +
                               3 * REPS * p["t1_ms"] * p["round_in_t1"]) for p in predicted)

def table_setting(target: GPT2, draft: Draft, name: str, prompts: list[list[int]], pilot: list[int], Ks: list[int],
                  n_tokens: int, out: pathlib.Path, tag: str, who: str, settings: int, bar: Progress) -> dict:
  """One setting's rows of Table 1 and its Figure 1 (who: the pair, for its titles; settings: how many the table
  has, for the estimate): the prediction printed first, then the timed runs."""
  sampling = SETTINGS[name][0]
  print(f"\n{name} ({setting(sampling)}): compiling, a pilot run and the round's parts timed alone, K by K",
        file=sys.stderr)
  predicted = [prediction(target, draft, pilot, K, sampling, n_tokens) for K in Ks]
  print(f"\npredicted for {name} ({setting(sampling)}), before its timed runs, from the round's parts timed alone "
        "and the pilot's α̂:")
  for p in predicted:
    print(f"  K={p['K']}: {p['speedup']:.2f}x, Algorithm 2 {p['alg2_ms_per_token']:.1f} ms a token against t(1) "
          f"{p['t1_ms']:.1f} ms (pilot α̂ {p['pilot_alpha']:.2f}, a round {p['round_in_t1']:.2f} t(1))")
  seconds = estimate_seconds(predicted, len(prompts), n_tokens)
  more = f"; the table's {settings} settings, if they cost alike: {duration(settings * seconds)}" * (settings > 1)
  print(f"  its timed runs: {duration(seconds)}{more}", flush=True)
  settle()  # the predictions compiled every K's calls: what their compiles left, out of the collector's reach
  rows = []
  with heartbeat(bar.status):
    for K, before in zip(Ks, predicted):
      runs = bench.timed_pairs(target, draft, prompts, n_tokens, K, sampling, bar)
      rows.append(bench.summarize(K, runs) | {"alpha_interval": alpha_interval(runs),
                                              "predicted_before": before["speedup"]})
  header = f"{who}; {name}, {setting(sampling)}; {Device.DEFAULT}"
  plots = [str(p) for p in bench.plot(rows, header, n_tokens, out, f"{tag}-{name}")]
  return {"setting": setting(sampling), "task": SETTINGS[name][1], "predicted": predicted, "rows": rows,
          "plots": plots}

# Table 1's columns: (header, the row's key, its format)
COLUMNS = [("K", "K", "{}"), ("Alg1 ms/tok", "alg1_ms_per_token", "{:.1f}"),
           ("Alg2 ms/tok", "alg2_ms_per_token", "{:.1f}"), ("speedup", "speedup", "{:.2f}x"),
           ("predicted before", "predicted_before", "{:.2f}x"), ("predicted after", "predicted", "{:.2f}x"),
           ("α̂", "alpha", "{:.3f}"),
           ("α̂ 95% interval", "alpha_interval", "{0[0]:.3f} to {0[1]:.3f}"),
           ("tok/round", "tokens_per_target_call", "{:.2f}")]

def table_lines(name: str, r: dict, prompts: int, n_tokens: int) -> list[str]:
  """A setting's Table 1 in words."""
  return [f"\nTable 1, {name} ({r['setting']}): {prompts} {r['task']} prompt{'s' * (prompts > 1)} × {n_tokens} new "
          "tokens",
          bench.table(r["rows"], COLUMNS),
          "  ms/tok: after the prompt's prefill. predicted before: from the pilot's α̂ and the round's parts timed "
          "alone, printed before the runs; after: from the runs' α̂ and the parts timed after each run "
          "(tools/bench.py). α̂'s interval: 95%, a bootstrap over the prompts.",
          "  Figure 1: " + ", ".join(r["plots"])]

def readme_row(pair: str, r: dict, dtype: str, when: str) -> str:
  """The best K's row for the README's results table (its last column, a projection at α = 0.71, stays empty:
  this is the measurement)."""
  best = max(r["rows"], key=lambda row: row["speedup"])
  return (f"| {pair}, {r['setting']} | trained, {dtype} | {best['K']} | {when} | {best['speedup']:.2f}x | "
          f"{best['alpha']:.2f} | - |")

def duration(seconds: float) -> str:
  """About how long, in words."""
  if seconds < 90:
    return f"about {seconds:.0f} s"
  return f"about {seconds / 60:.0f} min" if seconds < 5400 else f"about {seconds / 3600:.1f} h"

# ***** the run *****

def commit() -> str:
  """The repository's commit, with "+ changes" if its tracked files differ from it; "unknown" outside git."""
  root = pathlib.Path(__file__).resolve().parents[1]
  try:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown"
  return head + " + changes" * bool(dirty)

def device_name() -> str:
  """The device in a few words: the CPU's model where the kernels run on the host, else tinygrad's device."""
  return bench.host_cpu() if on_host_cpu(Device.DEFAULT) else Device.DEFAULT

def peak_host_bytes() -> int:
  """This process's peak resident memory so far (ru_maxrss: kilobytes on Linux, bytes on macOS)."""
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return peak if sys.platform == "darwin" else 1024 * peak

def parse_list(text: str, what: str, allowed: list[str] | None = None) -> list[str]:
  """A comma-separated option's items, each checked against allowed."""
  items = [s.strip() for s in text.split(",") if s.strip()]
  if not items or (allowed and not set(items) <= set(allowed)):
    raise ValueError(f"{what} is '{text}': give a comma-separated list of " + (", ".join(allowed) if allowed
                     else "values") + ".")
  return items

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  """The command line's settings; --help shows them, with this module's docstring as the epilog."""
  doc_first, doc_rest = __doc__.split("\n", 1)
  ap = argparse.ArgumentParser(description=doc_first, epilog=doc_rest,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--target", default="gpt2-xl", help="target model q (default gpt2-xl)")
  ap.add_argument("--draft", default="gpt2", help="draft model p (default gpt2)")
  ap.add_argument("--parts", default="greedy,theorem,table", help="which parts, comma-separated: greedy, "
                  "theorem, table (default all three)")
  ap.add_argument("--settings", default=",".join(SETTINGS), help="the table's and the theorem's settings "
                  f"(default all: {', '.join(SETTINGS)}; the theorem takes the sampled ones)")
  ap.add_argument("--ks", default="1,2,3,4,5,6", help="the table's K values (default 1,2,3,4,5,6)")
  ap.add_argument("--prompts", type=int, default=16, help="how many of each task's prompts in tools/prompts.json "
                  "(default all 16); prompt i uses seed i")
  ap.add_argument("--max-new-tokens", type=int, default=64, help="tokens per run in the table (default 64)")
  ap.add_argument("--theorem-n", type=int, default=2000, help="the theorem's rounds at each prefix (default 2000)")
  ap.add_argument("--greedy-tokens", type=int, default=PUBLISHED_TOKENS,
                  help=f"the greedy check's tokens (default {PUBLISHED_TOKENS}, as the published run)")
  ap.add_argument("--dtype", choices=("auto", "float32", "float16"), default="auto",
                  help="the weights' dtype (default auto: float16 where the device computes in it, but not "
                  "on a CPU, float32 there)")
  ap.add_argument("--device", help="tinygrad device (CPU, CUDA, METAL, ...); default: tinygrad's choice or $DEV")
  ap.add_argument("--tokenizer", help="folder with GPT-2's encoder.json and vocab.bpe (default: demo/'s copies)")
  ap.add_argument("--out", default="reproduce_out", help="folder for the JSON and the PNGs (default reproduce_out)")
  ap.set_defaults(random=False, ngram_max=3)  # what tools.session.load_models reads
  return ap.parse_args(argv)

def check_args(args: argparse.Namespace) -> tuple[list[str], list[str], list[int]]:
  """Refuse bad settings with one sentence before anything loads; the parts, the settings and the K values."""
  parts = parse_list(args.parts, "--parts", ["greedy", "theorem", "table"])
  names = parse_list(args.settings, "--settings", list(SETTINGS))
  try:
    Ks = [int(k) for k in parse_list(args.ks, "--ks")]
  except ValueError:
    raise ValueError(f"--ks is '{args.ks}': give comma-separated K values such as 1,2,4.") from None
  for K in Ks:
    check_request(K, args.max_new_tokens, 0, None)
  check_request(PUBLISHED_K, args.greedy_tokens, 0, None)
  if args.draft == "ngram":
    raise ValueError("The draft must be a model, as in the paper: give --draft a model name or folder, not ngram.")
  if not 1 <= args.prompts <= 16:
    raise ValueError(f"--prompts is {args.prompts}: it must be in 1..16, the prompts each task has.")
  if args.theorem_n < 10:
    raise ValueError(f"--theorem-n is {args.theorem_n}: give at least 10 rounds a prefix (2000 by default).")
  if "table" in parts:
    try:
      import matplotlib  # noqa: F401  (Figure 1's PNGs; asked here, not after an hour of runs)
    except ImportError:
      raise ValueError("The table draws Figure 1 with matplotlib: pip install matplotlib, or leave out "
                       "--parts table.") from None
  return parts, names, Ks

def choose_dtype(args: argparse.Namespace) -> str:
  """float16 or float32: --dtype, or by default float16 on a device that computes in it and is no CPU."""
  if args.dtype != "auto":
    return args.dtype
  half = not on_host_cpu(Device.DEFAULT) and dtypes.float16 in Device[Device.DEFAULT].renderer.supported_dtypes()
  return "float16" if half else "float32"

def run(args: argparse.Namespace) -> int:
  """Check, open the device, load the pair, run the parts asked for, write the JSON; the exit code."""
  parts, names, Ks = check_args(args)
  open_device(args.device, args.dtype == "float16", "--dtype float16")  # refused where the device lacks float16
  dtype = choose_dtype(args)
  args.half = dtype == "float16"
  enc, target, draft = load_models(args)
  task = json.loads(PROMPTS.read_text())
  check_pair(args, enc, target, draft, task)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  result = run_record(args, dtype, task)
  tag = result["date"].replace(":", "")[:15] + "Z"  # YYYY-MM-DDTHHMMZ: a file name on every system
  path = out / f"reproduce-{tag}.json"  # written after each part, so that an interrupted run keeps what it did
  if "greedy" in parts:
    print(f"\ngreedy check: Algorithms 1 and 2 at temperature 0, {args.greedy_tokens} tokens each", file=sys.stderr)
    with heartbeat(lambda: "greedy check"):
      published = (args.target, args.draft) == ("gpt2-xl", "gpt2")
      result["greedy"] = greedy_check(target, draft, enc, args.greedy_tokens, published)
    print("\n" + "\n".join(greedy_lines(result["greedy"])), flush=True)
    save(result, path)
  if "theorem" in parts:
    result["theorem"] = run_theorem(target, draft, enc, task, names, args.theorem_n)
    save(result, path)
  if "table" in parts:
    result["table"] = {}
    run_table(target, draft, enc, task, names, Ks, args, out, tag, result["table"], lambda: save(result, path))
    when = f"{device_name()}, {result['date'][:10]} ({result['commit']})"
    result["readme_rows"] = [readme_row(f"{args.target} drafted by {args.draft}", r, dtype, when)
                             for r in result["table"].values()]
    print("\nrows for the README's results table:\n" + "\n".join(result["readme_rows"]))
  return finish(result, path)

def check_pair(args: argparse.Namespace, enc, target: GPT2, draft: ModelDraft, task: dict) -> None:
  """Refuse a pair that GPT-2's tokenizer cannot drive, or whose context cannot hold the prompts."""
  check_tokenizer(args.target, enc, target)
  check_models([target, draft.model], max((enc.encode(p) for t in ("news", "code") for p in task[t]), key=len))

def run_record(args: argparse.Namespace, dtype: str, task: dict) -> dict:
  """What the JSON says of the run before its results (the date, the machine, the commit, the memory after
  loading the pair), printed in a line."""
  memory = {"host_peak_bytes": peak_host_bytes(), "device_bytes": GlobalCounters.mem_used}
  result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": bench.machine(), "device": Device.DEFAULT, "dtype": dtype, "commit": commit(),
            "tinygrad": importlib.metadata.version("tinygrad"), "python": platform.python_version(),
            "target": args.target, "draft": args.draft, "load_average_before": os.getloadavg()[0],
            "memory_after_loading": memory, "prompts_source": task["source"], "prompts_license": task["license"]}
  print(f"device {result['machine']}, {dtype} weights, commit {result['commit']}; target {args.target}, draft "
        f"{args.draft}; after loading, peak host memory {memory['host_peak_bytes'] / 1e9:.2f} GB, device memory in "
        f"use {memory['device_bytes'] / 1e9:.2f} GB")
  return result

def save(result: dict, path: pathlib.Path) -> None:
  """Write the JSON so far, with the load average now and each check's verdict."""
  result["load_average_after"] = os.getloadavg()[0]
  result["checks"] = {"greedy": result["greedy"]["passed"]} if "greedy" in result else {}
  result["checks"] |= {f"theorem, {r['setting']}": r["passed"] for r in result.get("theorem", {}).values()}
  path.write_text(json.dumps(result, indent=1))

def finish(result: dict, path: pathlib.Path) -> int:
  """Write the JSON, print the checks' verdicts: 0 if every check passed, else 1."""
  save(result, path)
  checks = result["checks"]
  print("\nchecks: " + ("; ".join(f"{k} {'passed' if v else 'FAILED'}" for k, v in checks.items()) or "none run"))
  print(f"results: {path}")
  return 0 if all(checks.values()) else 1

def run_theorem(target: GPT2, draft: ModelDraft, enc, task: dict, names: list[str], n: int) -> dict:
  """Theorem 1 at each sampled setting asked for, at theorem_prefixes, with its time estimated from its first
  rounds before the rest run."""
  prefixes = theorem_prefixes(enc, task)
  sampled = [name for name in names if SETTINGS[name][0].temperature > 0]
  if not sampled:
    return {}
  total = n * len(prefixes) * len(sampled)
  print(f"\nTheorem 1: {len(sampled)} settings × {len(prefixes)} prefixes × {n:,} rounds; compiling", file=sys.stderr)
  seconds = round_seconds(target, draft, prefixes[0], SETTINGS[sampled[0]][0])
  print(f"Theorem 1: {total:,} rounds of about {1e3 * seconds:.1f} ms: {duration(total * seconds)} (each setting "
        "compiles its round first)", flush=True)
  bar = Progress(total, "Theorem 1's rounds")
  with heartbeat(bar.status):
    results = {name: theorem(target, draft, prefixes, SETTINGS[name][0], n, bar) for name in sampled}
  for r in results.values():
    print("\n" + "\n".join(theorem_lines(r)), flush=True)
  return results

def theorem_prefixes(enc, task: dict) -> list[list[int]]:
  """The theorem's three fixed prefixes: the README's prompt, and the first news and code prompts."""
  return [enc.encode(TURING), enc.encode(task["news"][0]), enc.encode(task["code"][0])]

def round_seconds(target: GPT2, draft: ModelDraft, x: list[int], sampling: Sampling) -> float:
  """The seconds of one theorem round at x, after the one that compiles it: the median of 5."""
  at_prefix(target, draft, x, sampling)
  call, values, _ = draft.round(target, x, THEOREM_K, THEOREM_K, sampling)
  times = []
  for i in range(6):
    start = time.perf_counter()
    run_call(call, [*values, 0, i, len(x) - 1], Stats())
    times.append(time.perf_counter() - start)
  return float(np.median(times[1:]))

def run_table(target: GPT2, draft: Draft, enc, task: dict, names: list[str], Ks: list[int],
              args: argparse.Namespace, out: pathlib.Path, tag: str, tables: dict, saved: Callable[[], None]) -> None:
  """Table 1 and Figure 1 for each setting asked for, into tables by name, a progress line over all their timed
  runs; saved() after each setting."""
  bar = Progress(len(names) * len(Ks) * args.prompts, "the table's timed runs (settings × K × prompts)")
  for name in names:
    prompts = [enc.encode(p) for p in task[SETTINGS[name][1]][:args.prompts]]
    tables[name] = table_setting(target, draft, name, prompts, enc.encode(TURING), Ks, args.max_new_tokens, out,
                                 tag, f"target {args.target}, draft {args.draft}", len(names), bar)
    print("\n".join(table_lines(name, tables[name], len(prompts), args.max_new_tokens)), flush=True)
    saved()

if __name__ == "__main__":
  sys.exit(main(run, parse_args()))
