"""The command line of speculative.py: stream the text, print what the run measured (the loading, warm-up and
search it shares with tools/bench.py are in tools/session.py, the timing of a round's parts in tools/parts.py).

    python speculative.py --prompt "Alan Turing theorized that computers would one day become"
    python speculative.py --random --target gpt2 --draft 2,4,256 --prompt "Hello"   # random weights:
                                                                                     # no model download
"""
from __future__ import annotations
import argparse, codecs, math, sys
from dataclasses import replace
from tinygrad import Device
from costs import Stats, break_even_alpha, expected_tokens_per_round, measured_over_predicted, predicted_speedup
from speculative import EOT, Stream, autoregressive_sample, check_models, speculative_sample
from engine.compiled import calls
from tools.parts import time_parts
from tools.session import SEARCH_MINUTES, check_tokenizer, load_models, main, open_run, options, search_kernels
from tools.session import setting, warm_up, warm_up_baseline

# green, yellow, magenta; cyan: a plain target step, in a round where the draft proposed nothing
COLOURS = {"accepted": "\033[32m", "resampled": "\033[33m", "bonus": "\033[35m", "target": "\033[36m"}

def printer(enc, trace: bool) -> Stream:
  """A stream callback that prints tokens as they arrive (whole UTF-8 characters only),
  coloured by origin if trace."""
  utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
  def show(tokens: list[int], origins: list[str]) -> None:
    for t, o in zip(tokens, origins):
      text = "" if t == EOT else utf8.decode(enc.decode_single_token_bytes(t))
      print(f"{COLOURS[o]}{text}\033[0m" if trace and o in COLOURS else text, end="", flush=True)
  return show

def report(stats: Stats, K: int | None = None) -> str:
  """The stats block: counts, α̂ against the expected tokens per round, times and tokens/s; with K, Algorithm 2's,
  else Algorithm 1's."""
  lines = [f"new tokens            {stats.new_tokens} (stopped by {stats.stopped_by})",
           f"target calls          {stats.rounds}"]
  if K is not None:
    a, checked, m = stats.acceptance_rate, stats.accepted + stats.rejected, stats.costs
    plain = f"; {stats.plain_rounds} plain target steps, 1 token each" if stats.plain_rounds else ""
    drafting = ("found on the host, outside the round's call" if math.isnan(stats.draft_first_time) else
                f"one draft step of 1 row; a round's first, 2 rows: {1e3 * stats.draft_first_time:.2f} ms")
    lines += [f"acceptance rate α̂     {a:.3f} = {stats.accepted} accepted ÷ {checked} checked drafts "
              f"({stats.drafted} drafted; those after a rejection are never checked)",
              f"tokens/target call    {stats.tokens_per_target_call:.2f} (expected (1 - α^(K+1)) / (1 - α) "
              f"at α̂ and K = {m.K:.2f} drafted per call{plain}: {m.tokens(a):.2f})",
              f"time per round        {1e3 * stats.round_call_time:.2f} ms (one compiled call: drafts, "
              "target, tests and draws)",
              f"time per draft token  {1e3 * stats.draft_call_time:.2f} ms ({drafting})",
              f"time per target call  {1e3 * stats.target_call_time:.1f} ms ({K + 1} rows)",
              f"round's own work      {1e3 * stats.work_time:.2f} ms (its draws, tests and read, compiled and timed "
              "alone)",
              f"round ÷ its parts     {stats.round_over_parts:.2f} (replayed in turn after the run: a "
              f"round {1e3 * stats.round_replay_time:.2f} ms, its parts and own work {1e3 * stats.round_parts_time:.2f}"
              " ms)"]
  else:
    lines += [f"time per target call  {1e3 * stats.target_call_time:.1f} ms (one compiled call: the pass "
              "and its draw)"]
  return "\n".join(lines + [f"tokens per second     {stats.tokens_per_second:.2f} (after the prompt's prefill)"])

def cost_report(spec: Stats, base: Stats | None, K: int) -> str:
  """The speedup measured, beside the cost model's prediction from the round's parts timed alone and the chain
  that leads to it from Leviathan et al.'s ideal, factor by factor; then where the two differ, term by term
  (costs.measured_over_predicted); without Algorithm 1's run (base), what the prediction needs."""
  if base is None:
    return ("speedup               not predicted: the cost model prices a round in t(1), Algorithm 1's call, "
            "which --compare times")
  m, a, measured = spec.costs, spec.acceptance_rate, base.ms_per_token / spec.ms_per_token
  E, predicted = expected_tokens_per_round(a, m.K), predicted_speedup(a, m)
  even, terms = break_even_alpha(m), measured_over_predicted(spec, base)
  lookup = math.isnan(spec.draft_first_time)  # prompt lookup: its drafts come from the host
  # each step of the chain from the ideal adds one cost (prompt lookup's plain rounds, 1 token for t(1), in all)
  chain = lambda **costs: predicted_speedup(a, replace(m, **costs))
  steps = [("ideal", chain(first=m.c, s=1.0, v=0.0), "E / (Kc + 1): Leviathan et al.'s, K+1 rows priced as one token"),
           ("with s", chain(first=m.c, v=0.0), "E / (Kc + s): the target's K+1 rows cost s"),
           ("with first step", chain(v=0.0), "E / (c₁ + (K-1)c + s): the round's first draft step, c₁"),
           ("with v = predicted", predicted, "E / (c₁ + (K-1)c + s + v)" +
            f" in the {1 - m.plain:.0%} of rounds that draft (prompt lookup drafts a varying number: approximate)"
            * lookup)]
  t1, round_ms = 1e3 * spec.token_call_time, 1e3 * spec.decode_time / spec.rounds
  alone, priced = 1e3 * spec.round_alone_time, m.round * t1
  why = [("tokens a round", "tokens", f"{spec.tokens_per_target_call:.2f} measured ÷ {m.tokens(a):.2f} expected"),
         ("parts ÷ round", "parts", f"a round priced by its parts, {priced:.2f} ms ÷ the round replayed alone, "
          f"{alone:.2f} ms" + " (each with its lookups, and plain rounds at t(1))" * lookup),
         ("replay ÷ run", "replay", f"the round replayed ÷ a round of the run, {round_ms:.2f} ms (its host loop "
          "included)"),
         ("Algorithm 1 ÷ t(1)", "baseline", f"Algorithm 1's run, {base.ms_per_token:.2f} ms a token ÷ t(1), its "
          f"call timed alone, {t1:.2f} ms")]
  furthest = max(why, key=lambda w: abs(math.log(terms[w[1]])))[0]
  c = ("a draft's share of the lookups on the host ÷ t(1)" if lookup else
       f"a draft step ÷ t(1) (c₁, the round's first, 2 rows: {m.first:.3f})")
  return "\n".join([
    f"cost model            Leviathan et al. (2022), in t(1) = {t1:.2f} ms, Algorithm 1's call; each part of a "
    "round a compiled call timed alone, in turn with it",
    f"  E                   {E:.2f} tokens a round: (1 - α^(K+1)) / (1 - α) at α̂ {a:.3f}, K = {m.K:.2f}",
    f"  c                   {m.c:.3f} {c}",
    f"  s                   {m.s:.3f} the target's scoring step of {K + 1} rows ÷ t(1) (their model: 1)",
    f"  v                   {m.v:.3f} the round's own work ÷ t(1): its draws, tests and read (their model: 0)",
    *[f"  {name:<19} {x:.2f}x  {how}" for name, x, how in steps],
    f"speedup               {measured:.2f}x measured, {predicted:.2f}x predicted: Algorithm 1's ms a token ÷ "
    f"Algorithm 2's, {base.ms_per_token:.1f} ÷ {spec.ms_per_token:.1f}, after the prompt's prefill",
    f"measured ÷ predicted  {measured / predicted:.2f} = the product of these terms (furthest from 1: {furthest})",
    *[f"  {name:<19} {terms[key]:.2f}  {how}" for name, key, how in why],
    f"break-even α          {'none at this K' if even is None else f'{even:.2f}'} (where E = a round's cost, "
    f"{m.round:.2f} t(1), at K = {K})"])

def parse_args(argv: list[str] | None) -> argparse.Namespace:
  ap = argparse.ArgumentParser(description="Speculative sampling (Chen et al. 2023, Algorithm 2) "
                                           "with GPT-2 in tinygrad.")
  ap.add_argument("--prompt", required=True, help="text to continue")
  options(ap, max_new_tokens=128)
  ap.add_argument("--seed", type=int, default=0, help="one seed drives every draw: same seed, same tokens")
  ap.add_argument("--compare", action="store_true",
                  help="also run Algorithm 1 with the same settings and print the speedup")
  ap.add_argument("--trace", action="store_true",
                  help="colour tokens: green accepted draft, yellow resampled, magenta bonus, "
                  "cyan a plain target step where the draft proposed nothing")
  ap.add_argument("--device",
                  help="tinygrad device (CPU, CUDA, METAL, ...); default: tinygrad's choice or $DEV")
  ap.add_argument("--search-minutes", type=float, default=SEARCH_MINUTES,
                  help=f"the kernel search after the text stops after this long (default {SEARCH_MINUTES:.0f}); "
                  "the next run goes on from there")
  return ap.parse_args(argv)

def run(args: argparse.Namespace) -> None:
  K = args.lookahead
  if not args.search_minutes > 0:
    raise ValueError(f"--search-minutes is {args.search_minutes}: it must be more than 0 (BEAM=0 turns the "
                     "search off).")
  sampling = open_run(args, [K], args.seed, args.prompt, args.device)
  enc, target, draft = load_models(args)
  check_tokenizer(args.target, enc, target)
  prompt = enc.encode(args.prompt)
  check_models([target, *draft.models], prompt)
  warm_up(target, draft, prompt, K, sampling, args.seed)
  print(args.prompt, end="", flush=True)
  tokens, _, stats = speculative_sample(target, draft, prompt, args.max_new_tokens, K=K, sampling=sampling,
                                        seed=args.seed, stream=printer(enc, args.trace))
  print()
  if args.compare:  # Algorithm 1's call is timed in turn with the round's parts: t(1), the cost model's unit
    warm_up_baseline(target, prompt, K, sampling, args.seed)
  time_parts(target, draft, K, sampling, stats, prompt + tokens, baseline=args.compare)
  print(f"\n--- Algorithm 2 (speculative): target {args.target}, draft {args.draft}, K={K}, "
        f"{setting(sampling)}, device {Device.DEFAULT}")
  print(report(stats, K))
  base = None
  if args.compare:
    # Algorithm 1 streams its text too, so that both runs are timed alike
    print(f"\n{args.prompt}", end="", flush=True)
    _, base = autoregressive_sample(target, prompt, args.max_new_tokens, rows=K + 1, sampling=sampling,
                                    seed=args.seed, stream=printer(enc, False))
    print(f"\n\n--- Algorithm 1 (auto-regressive): target {args.target}\n{report(base)}")
  print(f"\n{cost_report(stats, base, K)}")
  search_kernels(calls(target, *draft.models), args.search_minutes)

def command() -> int:
  """python speculative.py: its exit code."""
  return main(run, parse_args(None))

if __name__ == "__main__":
  sys.exit(command())
