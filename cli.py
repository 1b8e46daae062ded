"""The command line of speculative.py: stream the text, print what the run measured (the loading, warm-up,
timing and search it shares with bench.py are in session.py).

    python speculative.py --prompt "Alan Turing theorized that computers would one day become"
    python speculative.py --random --target gpt2 --draft 2,4,256 --prompt "Hello"   # random weights:
                                                                                     # no model download
"""
from __future__ import annotations
import argparse, codecs, sys
from tinygrad import Device
from compiled import calls
from speculative import EOT, Draft, Stats, Stream, autoregressive_sample, check_run, expected_tokens_per_loop
from speculative import predicted_speedup, speculative_sample
from session import SEARCH_MINUTES, check, load_all, main, options, search_kernels, time_parts, warm_up
from session import warm_up_baseline

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

def report(stats: Stats, K: int | None = None, draft: Draft | None = None) -> str:
  """The stats block: counts, α̂ against the paper's expected tokens per call, times, c and tokens/s; with K and
  the draft, Algorithm 2's, else Algorithm 1's."""
  lines = [f"new tokens            {stats.new_tokens} (stopped by {stats.stopped_by})",
           f"target calls          {stats.rounds}"]
  if K is not None:
    a, checked = stats.acceptance_rate, stats.accepted + stats.rejected
    lines += [f"acceptance rate α̂     {a:.3f} = {stats.accepted} accepted ÷ {checked} checked drafts "
              f"({stats.drafted} drafted; those after a rejection are never checked)",
              f"tokens/target call    {stats.tokens_per_target_call:.2f} (paper's (1 - α^(K+1)) / (1 - α) "
              f"at α̂ and K = {stats.mean_drafted:.2f} drafted per call: "
              f"{expected_tokens_per_loop(a, stats.mean_drafted):.2f})",
              f"time per round        {1e3 * stats.round_call_time:.2f} ms (one compiled call: drafts, "
              "target, tests and draws)",
              f"time per draft token  {1e3 * stats.draft_call_time:.2f} ms ({draft.timing(stats)})"]
    lines += [f"time per target call  {1e3 * stats.target_call_time:.1f} ms ({K + 1} rows; c = {stats.cost_ratio:.3f})",
              f"round ÷ its parts     {stats.round_over_parts:.2f} (replayed in turn after the run: a round "
              f"{1e3 * stats.round_replay_time:.2f} ms, its parts {1e3 * stats.round_parts_time:.2f} ms)"]
  else:
    lines += [f"time per target call  {1e3 * stats.target_call_time:.1f} ms (one compiled call: the pass "
              "and its draw)"]
  return "\n".join(lines + [f"tokens per second     {stats.tokens_per_second:.2f}"])

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
  sampling = check(args, [K], args.seed, args.prompt, args.device)
  enc, target, draft = load_all(args)
  if target.config.vocab_size != enc.n_vocab:
    raise ValueError(f"{args.target} has a vocabulary of {target.config.vocab_size} tokens, "
                     f"not GPT-2's {enc.n_vocab}: the GPT-2 tokenizer cannot drive it.")
  prompt = enc.encode(args.prompt)
  check_run([target, *draft.models], prompt)
  warm_up(target, draft, prompt, K, sampling, args.seed)
  print(args.prompt, end="", flush=True)
  tokens, _, stats = speculative_sample(target, draft, prompt, args.max_new_tokens, K=K, sampling=sampling,
                                        seed=args.seed, stream=printer(enc, args.trace))
  print()
  time_parts(target, draft, K, sampling, stats, prompt + tokens)
  print(f"\n--- Algorithm 2 (speculative): target {args.target}, draft {args.draft}, K={K}, "
        f"device {Device.DEFAULT}")
  print(report(stats, K, draft))
  if args.compare:
    warm_up_baseline(target, prompt, K, sampling, args.seed)
    # Algorithm 1 streams its text too, so that both runs are timed alike
    print(f"\n{args.prompt}", end="", flush=True)
    _, base = autoregressive_sample(target, prompt, args.max_new_tokens, rows=K + 1, sampling=sampling,
                                    seed=args.seed, stream=printer(enc, False))
    predicted = predicted_speedup(stats.acceptance_rate, stats.mean_drafted, stats.cost_ratio)
    print(f"\n\n--- Algorithm 1 (auto-regressive): target {args.target}\n{report(base)}")
    print(f"\nspeedup               {stats.tokens_per_second / base.tokens_per_second:.2f}x measured, "
          f"{predicted:.2f}x predicted by (1 - α^(K+1)) / ((1 - α)(Kc + 1)) from α̂ and c")
  search_kernels(calls(target, *draft.models), args.search_minutes)

def command() -> int:
  """python speculative.py: its exit code."""
  return main(run, parse_args(None))

if __name__ == "__main__":
  sys.exit(command())
