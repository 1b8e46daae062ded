"""The command line of speculative.py: load the models, stream the text, print what the run measured.

    python speculative.py --prompt "Alan Turing theorized that computers would one day become"
    python speculative.py --random --target gpt2 --draft 2,4,256 --prompt "Hello"   # random weights:
                                                                                     # no model download
"""
from __future__ import annotations
import argparse, codecs, contextlib, math, multiprocessing, os, signal, sys, threading, time
from typing import Callable, Iterator
from tinygrad import Device, Tensor, dtypes
from tinygrad.helpers import DEV
from gpt2 import GPT2, MAX_ROWS, on_host_cpu
from sampling import Sampling
from speculative import EOT, Stats, Stream, autoregressive_sample, expected_tokens_per_loop, predicted_speedup
from speculative import NgramDraft, check_run, check_seed, speculative_sample, time_step
from weights import LoadError, checkpoint_dir, load_model, load_tokenizer, random_model

# The search after a run's text stops by itself after SEARCH_MINUTES; the next run goes on from the last kernel
# searched (tinygrad's cache keeps each one). Its expected length: SEARCH_SECONDS_PER_KERNEL for each distinct
# kernel the calls launch (Compiled.kernel_names): the try-it's 6 calls have 118, which this project's 2-core CPU
# searched in about 10.5 minutes (docs/benchmarks.md). A rough guide: a larger model's kernels take longer to
# time, and a faster machine searches faster.
SEARCH_MINUTES = 8.0
SEARCH_SECONDS_PER_KERNEL = 5.0

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
  """The stats block: counts, α̂ against the paper's expected tokens per call, times, c and tokens/s."""
  lines = [f"new tokens            {stats.new_tokens} (stopped by {stats.stopped_by})",
           f"target calls          {stats.target_calls}"]
  if K is not None:
    a, checked = stats.acceptance_rate, stats.accepted + stats.rejected
    lines += [f"acceptance rate α̂     {a:.3f} = {stats.accepted} accepted ÷ {checked} checked drafts "
              f"({stats.drafted} drafted; those after a rejection are never checked)",
              f"tokens/target call    {stats.tokens_per_target_call:.2f} (paper's (1 - α^(K+1)) / (1 - α) "
              f"at α̂ and K = {stats.mean_drafted:.2f} drafted per call: "
              f"{expected_tokens_per_loop(a, stats.mean_drafted):.2f})",
              f"time per round        {1e3 * stats.round_call_time:.2f} ms (one compiled call: drafts, "
              "target, tests and draws)"]
    if not math.isnan(stats.draft_first_time):  # a model draft: its two steps, timed alone
      lines += [f"time per draft token  {1e3 * stats.draft_call_time:.2f} ms (one draft step of 1 row, timed "
                f"alone; a round's first, 2 rows: {1e3 * stats.draft_first_time:.2f} ms)"]
    else:
      lines += [f"time per draft token  {1e3 * stats.draft_call_time:.2f} ms (prompt lookup, on the host)"]
    parts = stats.round_parts_time(K)
    lines += [f"time per target call  {1e3 * stats.target_call_time:.1f} ms ({K + 1} rows, timed alone; "
              f"c = {stats.cost_ratio:.3f})",
              f"round ÷ its parts     {stats.round_call_time / parts:.2f} (parts: {1e3 * parts:.2f} ms, the "
              "steps above as the round runs them)"]
  else:
    lines += [f"time per target call  {1e3 * stats.target_call_time:.1f} ms (one compiled call: the pass "
              "and its draw)"]
  return "\n".join(lines + [f"tokens per second     {stats.tokens_per_second:.2f}"])

def parse_args(argv: list[str] | None) -> argparse.Namespace:
  ap = argparse.ArgumentParser(description="Speculative sampling (Chen et al. 2023, Algorithm 2) "
                                           "with GPT-2 in tinygrad.")
  ap.add_argument("--prompt", required=True, help="text to continue")
  ap.add_argument("--target", default="gpt2-xl",
                  help="target model q: gpt2, gpt2-medium, gpt2-large, gpt2-xl, demo-target (the demo "
                  "pair, no download), or a checkpoint folder")
  ap.add_argument("--draft", default="gpt2",
                  help="draft model p: a name (gpt2, ..., demo-draft) or a checkpoint folder, as for "
                  "--target; "
                  "or ngram: prompt lookup, no model (see --ngram-max)")
  ap.add_argument("--ngram-max", type=int, default=3,
                  help="with --draft ngram: the longest n-gram to match (default 3)")
  ap.add_argument("--random", action="store_true",
                  help="random weights with the shapes of --target and --draft "
                  "(a name, or n_layer,n_head,n_embd): no model download; the text is noise")
  ap.add_argument("-K", "--lookahead", type=int, default=4, help="draft tokens per round (default 4)")
  ap.add_argument("--max-new-tokens", type=int, default=128)
  ap.add_argument("--temperature", type=float, default=1.0, help="0 means greedy (default 1.0)")
  ap.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens; 0 is off")
  ap.add_argument("--top-p", type=float, default=1.0,
                  help="keep the most likely tokens up to this mass; 1 is off")
  ap.add_argument("--seed", type=int, default=0, help="one seed drives every draw: same seed, same tokens")
  ap.add_argument("--compare", action="store_true",
                  help="also run Algorithm 1 with the same settings and print the speedup")
  ap.add_argument("--trace", action="store_true",
                  help="colour tokens: green accepted draft, yellow resampled, magenta bonus, "
                  "cyan a plain target step where the draft proposed nothing")
  ap.add_argument("--device",
                  help="tinygrad device (CPU, CUDA, METAL, ...); default: tinygrad's choice or $DEV")
  ap.add_argument("--half", action="store_true",
                  help="load the weights as float16 (half the memory; for GPUs)")
  ap.add_argument("--tokenizer", help="folder with GPT-2's encoder.json and vocab.bpe "
                  "(default: tiktoken's download and cache)")
  ap.add_argument("--search-minutes", type=float, default=SEARCH_MINUTES,
                  help=f"the kernel search after the text stops after this long (default {SEARCH_MINUTES:.0f}); "
                  "the next run goes on from there")
  return ap.parse_args(argv)

def host_cpu_instead() -> bool:
  """Whether to run on tinygrad's CPU device where tinygrad, with DEV unset, picked an OpenCL driver that runs on
  this machine's CPU (pocl): the same processor, but clang compiles the try-it's kernels in about 30 s where
  pocl took over 2 minutes before its first text (docs/benchmarks.md). DEV=CL or --device CL keeps OpenCL."""
  if "DEV" in os.environ or Device.DEFAULT == "CPU" or not on_host_cpu(Device.DEFAULT):
    return False
  try:
    (Tensor.ones(1, device="CPU") + 1).realize()  # its compiler (clang) is here
  except Exception:
    return False
  print(f"(tinygrad picked {Device.DEFAULT}, an OpenCL driver on this machine's CPU: running on tinygrad's CPU "
        "device instead, which compiles faster; DEV=CL keeps OpenCL)", file=sys.stderr)
  return True

def open_device(name: str | None, half: bool) -> None:
  """Open the device (name, or tinygrad's choice) and its compiler now, and refuse what it cannot do, so that
  an unusable device or setting fails with one sentence before any model loads."""
  if name is None and host_cpu_instead():
    name = "CPU"
  try:
    device = Device[name.upper() if name else Device.DEFAULT]
    renderer = device.renderer  # the kernel compiler: on CUDA this loads NVRTC
  except Exception as e:
    if "nvrtc" in str(e).lower():
      raise ValueError(f"The device {name or Device.DEFAULT} needs NVIDIA's NVRTC compiler, which was not "
                       "found: install the CUDA toolkit or `pip install -r requirements-cuda.txt`, and set "
                       "NVRTC_PATH to its libnvrtc.so (see the README's install lines).") from None
    raise ValueError(f"The device {name or Device.DEFAULT} is not usable here ({type(e).__name__}): "
                     "try CPU, CUDA or METAL.") from None
  if name:
    DEV.value = device.device
  if half and dtypes.float16 not in renderer.supported_dtypes():
    raise ValueError(f"The device {device.device} cannot compute in float16: drop --half.")

def load_all(args: argparse.Namespace) -> tuple[object, GPT2, GPT2 | NgramDraft]:
  """The tokenizer, the target and the draft;
  if any cannot be had, one error that names everything missing."""
  missing, enc = [], None
  try:
    enc = load_tokenizer(args.tokenizer)
  except LoadError as e:
    missing.append(str(e))
  if not args.random:
    for name in [args.target] + ([] if args.draft == "ngram" else [args.draft]):
      try:
        checkpoint_dir(name)  # downloads what is missing; fails fast with no network
      except LoadError as e:
        missing.append(str(e))
  if missing:
    raise LoadError(" And: ".join(missing) if len(missing) > 1 else missing[0])
  return enc, load_target(args), load_draft(args)

def load_target(args: argparse.Namespace) -> GPT2:
  """The target q, as --target, --random (seed 0) and --half say."""
  return load_named(args, args.target, seed=0)

def load_draft(args: argparse.Namespace) -> GPT2 | NgramDraft:
  """The draft: prompt lookup, or a model p as --draft, --random (seed 1) and --half say."""
  return NgramDraft(args.ngram_max) if args.draft == "ngram" else load_named(args, args.draft, seed=1)

def load_named(args: argparse.Namespace, name: str, seed: int) -> GPT2:
  """A checkpoint, or with --random random weights of its shape; float16 with --half."""
  dtype = dtypes.float16 if args.half else dtypes.float32
  return random_model(name, dtype, seed) if args.random else load_model(name, dtype)

def check_args(args: argparse.Namespace) -> None:
  """Refuse bad settings with one sentence before anything loads:
  nobody should wait through a 7 GB load to hear it."""
  Sampling(args.temperature, args.top_k, args.top_p)
  if not 1 <= args.lookahead < MAX_ROWS:
    raise ValueError(f"K (the lookahead) is {args.lookahead}: it must be in 1..{MAX_ROWS - 1}.")
  if args.max_new_tokens < 1:
    raise ValueError(f"max-new-tokens is {args.max_new_tokens}: it must be at least 1.")
  if not args.prompt:
    raise ValueError("The prompt is empty: give some text to continue.")
  check_seed(args.seed)
  if not args.search_minutes > 0:
    raise ValueError(f"--search-minutes is {args.search_minutes}: it must be more than 0 (BEAM=0 turns the "
                     "search off).")
  if args.draft == "ngram":
    NgramDraft(args.ngram_max)
  open_device(args.device, args.half)

@contextlib.contextmanager
def heartbeat(status: Callable[[], str], every: float = 8.0) -> Iterator[None]:
  """Print status() and the time so far on stderr every `every` seconds while the block runs: a compile or a
  search of minutes is never silent."""
  done, start = threading.Event(), time.perf_counter()
  def beat() -> None:
    while not done.wait(every):
      seconds = int(time.perf_counter() - start)
      print(f"  {status()}, {seconds // 60} min {seconds % 60:02d} s so far", file=sys.stderr, flush=True)
  thread = threading.Thread(target=beat, daemon=True)
  thread.start()
  try:
    yield
  finally:
    done.set()
    thread.join()

def warm_up(target: GPT2, draft: GPT2 | NgramDraft, prompt: list[int], K: int, settings: dict) -> None:
  """Compile every call Algorithm 2 makes, so that the timed run replays them all: the prompt's steps of K+1
  rows and the round (for prompt lookup also the plain target step), by a short run, twice: the first
  compiles, the second captures."""
  print(f"warming up on {Device.DEFAULT}: compiling kernels...", file=sys.stderr)
  done = []
  with heartbeat(lambda: f"compiling Algorithm 2: {len(done)} of 2 warm-up runs done"):
    for _ in range(2):
      speculative_sample(target, draft, prompt, 2 * K + 2, K=K, eos=None, **settings)
      if isinstance(draft, NgramDraft):  # a lookup that finds nothing takes a plain target step
        speculative_sample(target, draft, [0], 1, K=K, eos=None, **settings)
      done.append(1)
  if any(not c.searched for c in compiled_calls(target, draft)) and target.search:
    print("(tinygrad's default kernels: the fastest are not searched yet on this machine, so this run "
          "decodes about 2 to 3 times slower than later ones; after its text, it searches them, at most "
          "--search-minutes a run; BEAM=0 skips that)", file=sys.stderr)

def warm_up_baseline(target: GPT2, prompt: list[int], K: int, settings: dict) -> None:
  """Compile Algorithm 1's calls: the prompt's steps of K+1 rows (Algorithm 2's too) and its token step."""
  with heartbeat(lambda: "compiling Algorithm 1's step"):
    for _ in range(2):
      autoregressive_sample(target, prompt, 2, rows=K + 1, eos=None, **settings)

def time_steps(target: GPT2, draft: GPT2 | NgramDraft, K: int, sampling: Sampling) -> tuple[float, float, float]:
  """Seconds of a round's parts, each timed alone (compiled first, as the round runs them): the draft's first
  step of 2 rows and a later one of 1 row (NaN for prompt lookup, which times itself), and the target's step of
  K+1 rows. A fused round cannot time them apart."""
  with heartbeat(lambda: "timing the round's draft and target steps alone"):
    nan = float("nan")
    t_first, t_draft = (time_step(draft, 2, sampling), time_step(draft, 1, sampling)) \
      if isinstance(draft, GPT2) else (nan, nan)
    return t_first, t_draft, time_step(target, K + 1, sampling)

def compiled_calls(target: GPT2, draft: GPT2 | NgramDraft) -> list:
  """Every compiled call these models have made: their steps and the rounds."""
  models = [target] + ([draft] if isinstance(draft, GPT2) else [])
  return [c for m in models for c in m.steps.values()] + list(target.rounds.values())

@contextlib.contextmanager
def deadline(seconds: float, grace: float = 10.0) -> Iterator[threading.Event]:
  """Send this process SIGINT after `seconds`, as Ctrl-C would; the event it yields tells that interrupt from
  the user's own Ctrl-C. The interrupt may not come through in time: pocl's compiler held it for minutes, and
  tinygrad's search, stopping its pool of compile workers, can wait on them. So if the block has not ended
  `grace` seconds later, the search's workers are killed and the process ends there, with exit code 0, its
  cache as the last kernel searched left it."""
  expired, ended = threading.Event(), threading.Event()
  def expire() -> None:
    expired.set()
    os.kill(os.getpid(), signal.SIGINT)
    if not ended.wait(grace):
      for worker in multiprocessing.active_children():
        worker.kill()
      print(f"stopped at this run's bound of {seconds / 60:g} min: the next run goes on from there",
            file=sys.stderr, flush=True)
      os._exit(0)
  timer = threading.Timer(seconds, expire)
  timer.daemon = True
  if math.isfinite(seconds):
    timer.start()
  try:
    yield expired
  finally:
    ended.set()
    timer.cancel()

def search_kernels(calls: list, minutes: float = SEARCH_MINUTES) -> None:
  """Search the fastest kernels of every compiled call run with default ones, so that later runs use them:
  once per machine, cached on disk, at most `minutes` in this run. Ctrl-C stops it; the next run goes on from
  the last kernel searched."""
  todo = [c for c in calls if not c.searched and c.width]
  if not todo:
    return
  expected = SEARCH_SECONDS_PER_KERNEL * len(set().union(*(c.kernel_names() for c in todo))) / 60
  runs = math.ceil(expected / minutes)
  print(f"\nsearching the fastest kernels for later runs: {len(todo)} compiled calls, once on this machine, "
        f"about {expected:.0f} min in all (at most {minutes:.0f} min a run: about {runs} run{'s' * (runs > 1)}; "
        "Ctrl-C stops it and the next run goes on from there; BEAM=0 skips it)", file=sys.stderr)
  current, done = [""], []
  try:
    with heartbeat(lambda: f"searching {current[0]}"), deadline(60 * minutes) as expired:
      for i, call in enumerate(todo):
        current[0] = f"{i + 1} of {len(todo)} ({call.name})"
        call.search()
        done.append(call)
  except KeyboardInterrupt:
    if not expired.is_set():
      raise
    print(f"searched {len(done)} of {len(todo)} compiled calls in {minutes:g} min, this run's bound: the next "
          "run goes on from there", file=sys.stderr)
    return
  print("searched: later runs use these kernels", file=sys.stderr)

def run(args: argparse.Namespace) -> None:
  K, settings = args.lookahead, dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                     seed=args.seed)
  check_args(args)
  enc, target, draft = load_all(args)
  if target.config.vocab_size != enc.n_vocab:
    raise ValueError(f"{args.target} has a vocabulary of {target.config.vocab_size} tokens, "
                     f"not GPT-2's {enc.n_vocab}: the GPT-2 tokenizer cannot drive it.")
  prompt = enc.encode(args.prompt)
  check_run([target] + ([draft] if isinstance(draft, GPT2) else []), prompt, args.max_new_tokens)
  warm_up(target, draft, prompt, K, settings)
  print(args.prompt, end="", flush=True)
  _, _, stats = speculative_sample(target, draft, prompt, args.max_new_tokens, K=K,
                                   stream=printer(enc, args.trace), **settings)
  print()
  sampling = Sampling(args.temperature, args.top_k, args.top_p)
  t_first, t_draft, stats.target_call_time = time_steps(target, draft, K, sampling)
  if isinstance(draft, GPT2):
    stats.draft_first_time, stats.draft_call_time = t_first, t_draft
  print(f"\n--- Algorithm 2 (speculative): target {args.target}, draft {args.draft}, K={K}, "
        f"device {Device.DEFAULT}")
  print(report(stats, K))
  if args.compare:
    warm_up_baseline(target, prompt, K, settings)
    # Algorithm 1 streams its text too, so that both runs are timed alike
    print(f"\n{args.prompt}", end="", flush=True)
    _, base = autoregressive_sample(target, prompt, args.max_new_tokens, rows=K + 1,
                                    stream=printer(enc, False), **settings)
    predicted = predicted_speedup(stats.acceptance_rate, stats.mean_drafted, stats.cost_ratio)
    print(f"\n\n--- Algorithm 1 (auto-regressive): target {args.target}\n{report(base)}")
    print(f"\nspeedup               {stats.tokens_per_second / base.tokens_per_second:.2f}x measured, "
          f"{predicted:.2f}x predicted by (1 - α^(K+1)) / ((1 - α)(Kc + 1)) from α̂ and c")
  search_kernels(compiled_calls(target, draft), args.search_minutes)

def main(run: Callable[[argparse.Namespace], None] = run, args: argparse.Namespace | None = None) -> int:
  """Run a command: bad input, or a model or tokenizer that cannot be had, ends it with one sentence on stderr
  and exit code 2; Ctrl-C with one line and exit code 130."""
  try:
    run(args if args is not None else parse_args(None))
  except (ValueError, LoadError, FloatingPointError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:  # what is cached so far stays usable: a search resumes from its last kernel
    print("\ninterrupted", file=sys.stderr)
    return 130
  return 0

if __name__ == "__main__":
  sys.exit(main())
