"""What both command lines (speculative.py's, in tools/cli.py, and tools/bench.py) do around the algorithms: their
shared options and checks, opening the device, loading the models, warming up and searching the kernels. Each
option is declared here once; each bad input is refused once, before any model loads.
"""
from __future__ import annotations
import argparse, contextlib, gc, math, multiprocessing, os, signal, sys, threading, time
from typing import Callable, Iterator
from tinygrad import Device, Tensor, dtypes
from tinygrad.helpers import BEAM, DEV
from gpt2 import GPT2
from sampling import Sampling
from speculative import Draft, ModelDraft, NgramDraft, autoregressive_sample, check_request, speculative_sample
from weights import LoadError, checkpoint_dir, load_model, load_tokenizer, random_model
from engine.compiled import Compiled, calls, on_host_cpu

# The search after a run's text stops by itself after SEARCH_MINUTES; the next run goes on from the last kernel
# searched (tinygrad's cache keeps each one). Its expected length: SEARCH_SECONDS_PER_KERNEL for each distinct
# kernel the calls launch (Compiled.kernel_names), a rough guide from the try-it's search on this project's CPU
# (docs/benchmarks.md, "First run and kernel search"): a larger model's kernels take longer to time, and a faster
# machine searches faster.
SEARCH_MINUTES = 8.0
SEARCH_SECONDS_PER_KERNEL = 5.0

# ***** options and checks *****

def options(ap: argparse.ArgumentParser, max_new_tokens: int) -> None:
  """The options both command lines take (each keeps its own default of --max-new-tokens)."""
  ap.add_argument("--target", default="gpt2-xl",
                  help="target model q: gpt2, gpt2-medium, gpt2-large, gpt2-xl, demo-target (the demo "
                  "pair, no download), or a checkpoint folder")
  ap.add_argument("--draft", default="gpt2",
                  help="draft model p: a name (gpt2, ..., demo-draft) or a checkpoint folder, as for "
                  "--target; or ngram: prompt lookup, no model (see --ngram-max)")
  ap.add_argument("--ngram-max", type=int, default=3,
                  help="with --draft ngram: the longest n-gram to match (default 3)")
  ap.add_argument("--random", action="store_true",
                  help="random weights with the shapes of --target and --draft (a name, or "
                  "n_layer,n_head,n_embd): no model download; the costs are real, the text is noise")
  ap.add_argument("-K", "--lookahead", type=int, default=4, help="draft tokens per round (default 4)")
  ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens,
                  help=f"tokens to generate (default {max_new_tokens})")
  ap.add_argument("--temperature", type=float, default=1.0, help="0 means greedy (default 1.0)")
  ap.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens; 0 is off")
  ap.add_argument("--top-p", type=float, default=1.0,
                  help="keep the most likely tokens up to this mass; 1 is off")
  ap.add_argument("--half", action="store_true",
                  help="load the weights as float16 (half the memory; for GPUs)")
  ap.add_argument("--tokenizer", help="folder with GPT-2's encoder.json and vocab.bpe "
                  "(default: the copies shipped in demo/, else tiktoken's download and cache)")

def setting(sampling: Sampling) -> str:
  """The sampling settings in words, as the costs a run measures depend on them (a filter is work a step does)."""
  if sampling.temperature == 0:
    return "greedy"
  filters = [f"top-k {sampling.top_k}"] * bool(sampling.top_k) + [f"top-p {sampling.top_p:g}"] * (sampling.top_p < 1)
  return ", ".join([f"temperature {sampling.temperature:g}", *filters])

def open_run(args: argparse.Namespace, Ks: list[int], seed: int, prompt: str | None,
             device: str | None = None) -> Sampling:
  """Refuse bad settings with one sentence before anything loads (nobody should wait through a 7 GB load to
  hear it), and open the device; the Sampling that every call then takes."""
  sampling = Sampling(args.temperature, args.top_k, args.top_p)
  for K in Ks:
    check_request(K, args.max_new_tokens, seed, prompt)
  choose_draft(args.draft, args.ngram_max, lambda name: None)  # prompt lookup checks its n-gram length
  open_device(device, args.half)
  return sampling

def host_cpu_instead() -> bool:
  """Whether to run on tinygrad's CPU device where tinygrad, with DEV unset, picked an OpenCL driver that runs on
  this machine's CPU (pocl): the same processor, but clang compiles the try-it's kernels several times faster
  (docs/engine.md). DEV=CL or --device CL keeps OpenCL."""
  if "DEV" in os.environ or Device.DEFAULT == "CPU" or not on_host_cpu(Device.DEFAULT):
    return False
  try:
    (Tensor.ones(1, device="CPU") + 1).realize()  # its compiler (clang) is here
  except Exception:
    return False
  print(f"(tinygrad picked {Device.DEFAULT}, an OpenCL driver on this machine's CPU: running on tinygrad's CPU "
        "device instead, which compiles faster; DEV=CL keeps OpenCL)", file=sys.stderr)
  return True

def open_device(name: str | None, half: bool, half_flag: str = "--half") -> None:
  """Open the device (name, or tinygrad's choice) and its compiler now, and refuse what it cannot do, so that
  an unusable device or setting fails with one sentence before any model loads (half_flag: the option that asked
  for float16, which the sentence says to drop)."""
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
    raise ValueError(f"The device {device.device} cannot compute in float16: drop {half_flag}.")

# ***** the models *****

def choose_draft(name: str, ngram_max: int, load: Callable[[str], GPT2]) -> Draft:
  """The draft that --draft names: prompt lookup for "ngram", else ModelDraft(load(name))."""
  return NgramDraft(ngram_max) if name == "ngram" else ModelDraft(load(name))

def load_models(args: argparse.Namespace, tokenizer: bool = True) -> tuple[object, GPT2, Draft]:
  """The tokenizer (None unless asked), the target and the draft; if any cannot be had, one error that names
  everything missing, before the target loads (the draft, the smaller, loads only when nothing is missing)."""
  missing = []
  def note(get: Callable, name: str):  # get(name), or None with its error noted
    try:
      return get(name)
    except LoadError as e:
      missing.append(str(e))
  enc = note(load_tokenizer, args.tokenizer) if tokenizer else None
  if not args.random:
    note(checkpoint_dir, args.target)  # downloads what is missing; fails fast with no network
  def model(name: str) -> GPT2 | None:  # the draft's: downloaded as the target's, loaded if nothing is missing
    if not args.random:
      note(checkpoint_dir, name)
    return None if missing else load_named(args, name, seed=1)
  draft = choose_draft(args.draft, args.ngram_max, model)
  if missing:
    raise LoadError(" And: ".join(missing) if len(missing) > 1 else missing[0])
  return enc, load_named(args, args.target, seed=0), draft

def check_tokenizer(name: str, enc, model: GPT2) -> None:
  """Refuse a model whose vocabulary is not the GPT-2 tokenizer's, which could not drive it."""
  if model.config.vocab_size != enc.n_vocab:
    raise ValueError(f"{name} has a vocabulary of {model.config.vocab_size} tokens, not GPT-2's {enc.n_vocab}: "
                     "the GPT-2 tokenizer cannot drive it.")

def load_named(args: argparse.Namespace, name: str, seed: int) -> GPT2:
  """The one way a command loads a model by name: a checkpoint, or with --random random weights of its shape
  (seed 0 for the target, 1 for the draft); float16 with --half."""
  dtype = dtypes.float16 if args.half else dtypes.float32
  return random_model(name, dtype, seed) if args.random else load_model(name, dtype)

# ***** warming up *****

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

def warm_up(target: GPT2, draft: Draft, prompt: list[int], K: int, sampling: Sampling, seed: int) -> None:
  """Compile every call Algorithm 2 makes (each compiled and captured by its first call), so that the timed run
  replays them all: the prompt's steps of K+1 rows and the round, by a short run; a round on a one-token
  prompt, where a draft may propose nothing (prompt lookup then takes a plain target step); and one on a token
  repeated, where prompt lookup finds a match and drafts (the short run may find none)."""
  print(f"warming up on {Device.DEFAULT}: compiling kernels...", file=sys.stderr)
  done = []
  with heartbeat(lambda: f"compiling Algorithm 2: {len(done)} of 3 warm-up runs done"):
    for prompt_tokens, new_tokens in ((prompt, 2 * K + 2), ([0], 1), ([0, 0], 1)):
      speculative_sample(target, draft, prompt_tokens, new_tokens, K=K, sampling=sampling, seed=seed, eos=None)
      done.append(1)
  settle()
  if any(not c.searched and c.beam for c in calls(target, *draft.models)):
    print("(tinygrad's default kernels: the fastest are not searched yet on this machine, so this run "
          "decodes about 2 to 3 times slower than later ones; after its text, it searches them, at most "
          "--search-minutes a run; BEAM=0 skips that)", file=sys.stderr)

def warm_up_baseline(target: GPT2, prompt: list[int], K: int, sampling: Sampling, seed: int) -> None:
  """Compile Algorithm 1's calls: the prompt's steps of K+1 rows (Algorithm 2's too) and its token step."""
  with heartbeat(lambda: "compiling Algorithm 1's step"):
    autoregressive_sample(target, prompt, 2, rows=K + 1, sampling=sampling, seed=seed, eos=None)
  settle()

def settle() -> None:
  """Collect Python's garbage, then move what survives, among it the millions of tinygrad objects that the
  compiles left, out of the collector's reach (gc.freeze): else a collection in mid-run walks them all, and a
  round stalls for many times its length (docs/engine.md)."""
  gc.collect()
  gc.freeze()

# ***** the kernel search *****

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

def search_kernels(todo: list[Compiled], minutes: float = SEARCH_MINUTES) -> None:
  """Search the fastest kernels of every compiled call run with default ones, so that later runs use them:
  once per machine, cached on disk, at most `minutes` in this run. Ctrl-C stops it; the next run goes on from
  the last kernel searched."""
  todo = [c for c in todo if not c.searched and c.beam]
  if not todo:
    return
  expected = SEARCH_SECONDS_PER_KERNEL * len(set().union(*(c.kernel_names() for c in todo))) / 60
  runs = math.ceil(expected / minutes)
  bound = "to the end" if math.isinf(minutes) else \
          f"at most {minutes:.0f} min a run: about {runs} run{'s' * (runs > 1)}"
  print(f"\nsearching the fastest kernels for later runs: {len(todo)} compiled calls, once on this machine, "
        f"about {expected:.0f} min in all ({bound}; Ctrl-C stops it and the next run goes on from there; BEAM=0 "
        "skips it)", file=sys.stderr)
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

# ***** running a command *****

def main(run: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
  """Run a command; its exit code is run's (0 if it returns none). Bad input, or a model or tokenizer that cannot
  be had, ends it with one sentence on stderr and exit code 2; Ctrl-C with one line and exit code 130. Outside
  Compiled.search no kernel is searched, whatever BEAM says: tinygrad reads BEAM too, and would search every
  kernel it compiles."""
  BEAM.value = 0
  try:
    code = run(args)
  except (ValueError, LoadError, FloatingPointError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:  # what is cached so far stays usable: a search resumes from its last kernel
    print("\ninterrupted", file=sys.stderr)
    return 130
  return code or 0
