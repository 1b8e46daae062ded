"""Compiled calls: how gpt2.py's forward and speculative.py's rounds run fast, and when their kernels are searched.
A first reading can skip this file: speculative.py reads as Algorithm 2 without it.

    probs = compiled.logits(model, ids, start_pos, last=3, head=f)  # NumPy: f(the last 3 positions' logits)
    step = compiled.step(model, rows, head)                          # the compiled call on `rows` tokens

A compiled call is TinyJit's capture of a function of Variables: its later calls replay the kernels, and the
host's work is binding numbers and one launch. This module holds that machinery (Compiled, the host read,
symbolic ids), the rows a call runs at (padded_rows), and the kernel-search policy. Importing it sets nothing in
tinygrad: outside Compiled, the caller decides whether anything searches (the command lines turn BEAM off).
"""
from __future__ import annotations
import ctypes, hashlib, os, pathlib, time
from typing import TYPE_CHECKING, Callable
import numpy as np
from tinygrad import Context, Device, Tensor, TinyJit, UOp, Variable, dtypes
from tinygrad.helpers import diskcache_get, diskcache_put
from tinygrad.uop.ops import Ops
from engine.layout import MAX_ROWS, workgroups
if TYPE_CHECKING:  # the engine imports no file of the lesson: a model is only named in type hints
  from gpt2 import GPT2

# A call of 2 or more tokens runs in steps of `rows` rows (K+1 in speculative sampling), the last one padded
# with rows whose results are dropped: every call of up to `rows` tokens replays one step.
PREFILL_ROWS = 8  # the rows per step when the caller names none

def padded_rows(rows: int, searched: bool, device: str) -> int:
  """The rows a pass of `rows` tokens runs at on the device, the layout of every compiled step and round.
  tinygrad's default kernels on its CPU device read a weight once for all rows only when 3 or 4 divides them,
  else once per row, so a pass of 3 or more rows runs padded there to the next such number (5 rows to 6, 7 to
  8): faster, as timed in docs/engine.md; 1 and 2 rows run as they are (padding 2 rows to 4 was slower there). A
  searched kernel picks its own layout for the real rows, and on a GPU (a device with workgroups) layout.fused
  lays the rows out itself: no padding."""
  if searched or rows <= 2 or workgroups(device):
    return rows
  return next(w for w in range(rows, MAX_ROWS + 1) if w % 3 == 0 or w % 4 == 0)

# ***** the kernel search *****

# BEAM times candidate layouts of each kernel and keeps the fastest (much faster than the default kernels on a
# CPU), but takes minutes per call. So no call searches: a call compiles with default kernels until
# Compiled.search has searched it on this machine (kept in ~/.cache/tinygrad). BEAM=0: no search; BEAM=N: N
# candidates kept at each stage of the search, by default 4 on a GPU (a wider beam bought a step of 5 rows closer
# to one row's cost for twice the search) and 2 where the kernels run on this machine's CPU, whose searches are
# slower: the figures are in docs/engine.md.
BEAM_SET = int(os.environ["BEAM"]) if "BEAM" in os.environ else None

def on_host_cpu(device: str) -> bool:
  """Whether the device's kernels run on this machine's CPU: tinygrad's CPU device, or an OpenCL driver for the
  CPU (pocl), told apart from an OpenCL GPU by the device type that OpenCL reports, not by a name."""
  if device.split(":")[0] != "CL":
    return device.split(":")[0] == "CPU"
  from tinygrad.runtime.autogen import opencl as cl
  kind = ctypes.c_uint64()
  cl.clGetDeviceInfo(Device[device].cl_dev, cl.CL_DEVICE_TYPE, ctypes.sizeof(kind), ctypes.byref(kind), None)
  return bool(kind.value & cl.CL_DEVICE_TYPE_CPU)

def search_beam(device: str) -> int:
  """How many candidates a kernel search keeps on the device: BEAM if set, else as above; 0 (no search) on
  DEV=NULL, which runs no kernel to time."""
  return 0 if device == "NULL" else BEAM_SET if BEAM_SET is not None else 2 if on_host_cpu(device) else 4

# The files whose code a compiled call traces, from the repository's root: the model, its layout, the sampling
# heads and draws, Algorithm 2's round and this file. Their hash is in every call's signature, so that an edit to
# any of them makes a kernel searched before count as not searched (tests/test_speculative.py edits each).
TRACED = ("gpt2.py", "sampling.py", "speculative.py", "engine/layout.py", "engine/compiled.py")

def source_hash(root: pathlib.Path) -> str:
  """The hash of the TRACED files under root."""
  return hashlib.sha256(b"".join((root / f).read_bytes() for f in TRACED)).hexdigest()[:16]

SOURCE = source_hash(pathlib.Path(__file__).resolve().parents[1])

# ***** compiled calls *****

def read(out: Tensor, into: np.ndarray) -> np.ndarray:
  """Copy a compiled call's result out of the device's own buffer into the host array `into`, and return it.

  The copy goes straight from the device's buffer, on every device: not by .to("CPU"), as opening tinygrad's
  CPU device compiles with clang, which a GPU machine may lack; and not by Buffer.as_memoryview() or .numpy(),
  which in tinygrad 0.14 copy through a fresh host buffer each time, several times the host work of this copy
  into an array allocated once (docs/engine.md)."""
  buf = out.uop.buffer
  buf.allocator._copyout(memoryview(into).cast("B"), buf._buf)
  return into

def symbolic_ids(ids: tuple[UOp, ...]) -> Tensor:
  """Token ids given as Variables, as the int32 Tensor that forward takes: numbers bound at each call."""
  return Tensor.cat(*[Tensor.full((1,), i, dtype=dtypes.int32) for i in ids])

def flagged(result: Tensor, *probs: Tensor) -> Tensor:
  """What a compiled call returns: its int32 result, then 1 if any row of any of probs sums to NaN or infinity
  (corrupt weights), else 0."""
  # the sums written out first: left inside the result's kernel, each of its threads would redo every row's sum
  sums = Tensor.cat(*[p.sum(-1).flatten() for p in probs]).contiguous()
  return result.cat((sums.isnan() | sums.isinf()).max().cast(dtypes.int32).reshape(1)).contiguous()

class Compiled:
  """A function of Variables compiled by TinyJit, which captures it on its first call; every later call replays
  its kernels. build(searched) gives the function and its Variables. Its kernels are tinygrad's default
  ones until search() has searched them on this machine, which is remembered on disk under its signature, so
  that later processes compile them searched at once. beam: the candidates its search keeps (0: no search)."""
  def __init__(self, name: str, signature: str, beam: int,
               build: Callable[[bool], tuple[Callable[..., Tensor], list[UOp]]]):
    self.name, self.signature, self.beam, self.build = name, signature, beam, build
    self.searched = bool(beam) and bool(diskcache_get("tinyspec_searched", signature))
    self.jit, self.variables = self.compile()
    self.host: np.ndarray | None = None  # the result's host array, for to_host

  def compile(self) -> tuple[TinyJit, list[UOp]]:
    fn, variables = self.build(self.searched)
    jit = TinyJit(fn)
    # capture on the first call: TinyJit's own first call runs fn eagerly, for work that is done once (weights
    # not yet on the device), which is done before any call (load_model realizes the weights, cached_call
    # prepares the caches and norms); that run would build, schedule and run the whole graph once more
    jit.cnt = 1
    return jit, variables

  def __call__(self, *values: int) -> Tensor:
    """Run or replay it with its Variables bound to values (missing ones 0): its result, on the device."""
    values = (*values, *[0] * (len(self.variables) - len(values)))
    with Context(BEAM=self.beam if self.searched and self.jit.cnt < 2 else 0):  # searched: from the cache
      return self.jit(*(v.bind(int(n)) for v, n in zip(self.variables, values)))

  def to_host(self, out: Tensor) -> np.ndarray:
    """Its result copied into its host array (allocated once, overwritten by the next to_host)."""
    if self.host is None:
      self.host = np.zeros(out.shape, out.dtype.fmt)  # zeros: DEV=NULL copies nothing in
    return read(out, self.host)

  def kernel_names(self) -> set[str]:
    """The names of the kernels its replay launches, each once: about the kernels a search of it times (a
    layer's kernels repeat in every layer, under one name, and are searched once)."""
    linear = self.jit.captured.linear.toposort() if self.jit.captured is not None else []
    return {u.arg.name for u in linear if u.op is Ops.PROGRAM}

  def search(self) -> None:
    """Search its fastest kernels with tinygrad's BEAM (minutes), recompile with them, and remember that."""
    self.searched = True
    self.jit, self.variables = self.compile()
    with Context(BEAM=self.beam):
      self()  # compiles, searching, and captures
    diskcache_put("tinyspec_searched", self.signature, True)

# ***** a model's compiled calls *****

Head = Callable[[Tensor], Tensor]  # maps a step's (rows, vocab) logits to its result, e.g. sampling.Sampling

def cached_call(model: GPT2, key: tuple, make: Callable[[], Compiled]) -> Compiled:
  """The compiled call under key among the model's, made on first use (its models prepared first): every run
  with the same models and settings replays it, and it goes when the model goes."""
  if key not in model.calls:
    prepare(model)
    model.calls[key] = make()
  return model.calls[key]

def prepare(model: GPT2) -> None:
  """The model's KV caches and packed norms (GPT2.prepare), the norms written out on tinygrad's CPU device."""
  model.prepare(write_norms=model.wte.weight.device == "CPU")

def beam_of(model: GPT2) -> int:
  """The candidates a search of the model's compiled calls keeps (search_beam of its device; 0: no search)."""
  return search_beam(model.wte.weight.device)

def signature(model: GPT2) -> str:
  """What the model's compiled calls' kernels depend on besides their shape."""
  w = model.wte.weight
  return f"{model.config}|{w.dtype}|{w.device}|BEAM={beam_of(model)}|{SOURCE}"

def forward_rows(model: GPT2, ids: Tensor, start_pos: int | UOp, head: Head | None, searched: bool) -> Tensor:
  """head(logits) after each of the T token ids at start_pos.., run at padded_rows(T, searched, device) rows: what
  every compiled step and round runs, so that a step timed alone launches the kernels a round launches. Its result
  has all the rows, realized as one buffer: slicing the padding away before then could shrink the matmuls
  back to T rows, another layout. The padding rows (token 0) come after the real ones, so that causal
  attention keeps them out of the real rows; their keys and values land at start_pos+T.., past every real
  position, where the next call writes before it reads (also at K = 63 with the prompt two tokens before
  the context's end: the cache's MAX_ROWS - 1 spare positions hold them)."""
  T = ids.shape[0]
  logits = model.forward(ids.pad(((0, padded_rows(T, searched, model.wte.weight.device) - T),)), start_pos)
  return (logits if head is None else head(logits)).contiguous()

def step(model: GPT2, rows: int, head: Head | None) -> Compiled:
  """The compiled call on `rows` tokens: Variables start_pos and one id per row, result head(logits) for
  padded_rows(rows) rows (forward_rows; those past the tokens given are padding)."""
  def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
    def run(start_pos: UOp, *ids: UOp) -> Tensor:
      return forward_rows(model, symbolic_ids(ids), start_pos, head, searched)  # stays on the device: see read
    variables = [Variable("start_pos", 0, model.config.n_ctx - 1)]
    return run, variables + [Variable(f"id{t}", 0, model.config.vocab_size - 1) for t in range(rows)]
  name, sig = f"{model.config.n_layer} layers, {rows} rows", f"{signature(model)}|rows={rows}|{head!r}"
  return cached_call(model, ("step", rows, head), lambda: Compiled(name, sig, beam_of(model), build))

def logits(model: GPT2, ids: list[int], start_pos: int, last: int | None = None, head: Head | None = None,
           rows: int = PREFILL_ROWS) -> np.ndarray:
  """Next-token logits (last, vocab), NumPy float32, after the last `last` (default: all) of ids, fed at
  positions start_pos.., writing them into the KV cache; with head, head(logits) instead. One token runs as
  a one-row step, more in steps of `rows` (the last one padded): each replays one compiled step."""
  cfg, T = model.config, len(ids)
  last = T if last is None else last
  if not (0 <= start_pos and start_pos + T <= cfg.n_ctx):
    raise ValueError(f"positions {start_pos}..{start_pos + T - 1} fall outside the context of {cfg.n_ctx}")
  if not all(0 <= i < cfg.vocab_size for i in ids):
    raise ValueError(f"token ids must be in 0..{cfg.vocab_size - 1}")
  if not 1 <= last <= T:
    raise ValueError(f"last is {last}: it must be in 1..{T}, the number of tokens")
  if not 1 <= rows <= MAX_ROWS:
    raise ValueError(f"rows is {rows}: it must be in 1..{MAX_ROWS}")
  rows, out = 1 if T == 1 else rows, []
  call = step(model, rows, head)
  for b in range(0, T, rows):
    block = ids[b:b + rows]
    result = call(start_pos + b, *block)
    if b + len(block) > T - last:  # it holds some of the last `last` tokens: copy their rows out of the
      host = call.to_host(result)                      # step's host array, which its next read overwrites
      out.append(host[max(T - last - b, 0):len(block), :cfg.vocab_size].copy())  # less the padding tokens
  return out[0] if len(out) == 1 else np.concatenate(out)

def prefill(model: GPT2, tokens: list[int], head: Head | None, rows: int) -> None:
  """Feed a prompt's tokens into model's KV cache, in compiled steps of `rows` rows (their results unread),
  and wait for the device to finish them: the decode is timed from there."""
  if not tokens:
    return
  call = step(model, rows if len(tokens) > 1 else 1, head)
  for b in range(0, len(tokens), rows):
    out = call(b, *tokens[b:b + rows])
  Device[out.device].synchronize()

def calls(*models: GPT2) -> list[Compiled]:
  """Every compiled call these models have made: their steps and the rounds they are the target of."""
  return [c for m in models for c in m.calls.values()]

def time_calls(calls: list[tuple[Compiled, list[int], bool]], reps: int) -> list[float]:
  """Seconds of each compiled call with its values bound, its result read on the host where its flag says so (as
  a run reads a round's or a token's numbers): the median of reps replays, the calls taking turns (each compiled
  first, each waited for on the device), so that a slow spell of the machine falls on all of them alike and
  their ratios hold. What c, the target's K+1 rows and a round over its parts are computed from, since a fused
  round cannot time its parts."""
  for call, values, _ in calls:
    while call.jit.cnt < 2:  # not captured yet: its first call compiles and captures it
      call(*values)
  times: list[list[float]] = [[] for _ in calls]
  for _ in range(reps):
    for (call, values, read_back), spent in zip(calls, times):
      begin = time.perf_counter()
      out = call(*values)
      if read_back:
        call.to_host(out)
      Device[out.device].synchronize()
      spent.append(time.perf_counter() - begin)
  return [float(np.median(spent)) for spent in times]
