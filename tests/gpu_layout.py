"""How a compiled call's kernels sit on a GPU, read from the CUDA kernels tinygrad compiles for an H100 with no GPU
(DEV=NULL:CUDA:sm_90: NVRTC compiles every kernel, none runs): the threads each kernel launches, the loop trips
one thread runs, and how each kernel reads the weight matrices. tests/test_kernels.py holds them to the bars
below; run alone, it prints them for the default command's models (every layer):

    DEV=NULL:CUDA:sm_90 NULL_ALLOW_COPYOUT=1 BEAM=0 NVRTC_PATH=.../libnvrtc.so.12 \
        python tests/gpu_layout.py --target gpt2-xl --draft gpt2 [--half]

The bars (issue 48): no thread runs more than 1024 loop trips (nested loops multiply, loops in sequence add, an
unrolled body counts once, a loop bounded by a position Variable counts 256 plus its constant); every reduction
that reads a weight matrix of 1 MiB or more launches at least min(32768, its bytes ÷ 64) threads, its
neighbouring threads read neighbouring addresses, and it reads each weight once for all rows (once a block of
layout.ROWS rows, where a call has more); and the embedding's gather reads only the rows it needs.

With --metal it renders the same calls' kernels for Metal instead (DEV=NULL:METAL, PARALLEL=0), and holds each
to Metal's limits, which tinygrad does not check: at most 1024 threads a threadgroup, 32 KB of threadgroup
memory and 31 buffers a kernel (a Variable, passed as `constant int&`, counts as one).
"""
from __future__ import annotations
import argparse, itertools, math, os, re, sys
from dataclasses import dataclass
from tinygrad import Context, dtypes
from tinygrad.uop.ops import AddrSpace, Ops, UOp

MAX_TRIPS = 1024
VARIABLE_TRIPS = 256  # a loop over the positions so far (start_pos + T) counts as 256 plus its constant

@dataclass
class Read:
  """One kernel's loads of one weight matrix."""
  weight: str
  threads: int
  times: float         # elements loaded (by every thread, every trip) ÷ the matrix's elements
  strides: set[int]    # address step, in elements, from a thread to its neighbour (threadIdx.x + 1)
  widths: set[int]     # elements per load

@dataclass
class Kernel:
  name: str
  threads: int
  trips: int
  reads: list[Read]
  gathered: dict[str, int]  # weights gathered (read with no loop, every load gated): elements passing the gate

# ***** reading one kernel's linearized code *****

def loop_trips(bound: UOp) -> int:
  return int(bound.vmax) if bound.vmin == bound.vmax else VARIABLE_TRIPS + int(bound.vmin)

def trips(code: list[UOp]) -> int:
  """The loop trips one thread runs: nested loops multiply, loops in sequence add."""
  done, bounds = [0], []
  for u in code:
    if u.op is Ops.RANGE:
      bounds.append(loop_trips(u.src[0]))
      done.append(0)
    elif u.op is Ops.END and bounds:
      inner = done.pop()
      done[-1] += bounds.pop() * max(1, inner)
  return done[0]

INTEGER = {Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b,
           Ops.SHL: lambda a, b: a << b, Ops.SHR: lambda a, b: a >> b, Ops.AND: lambda a, b: a & b,
           Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b, Ops.MAX: max,
           Ops.CDIV: lambda a, b: int(a / b) if b else 0, Ops.CMOD: lambda a, b: a - b * int(a / b) if b else 0,
           Ops.CMPLT: lambda a, b: int(a < b), Ops.CMPNE: lambda a, b: int(a != b), Ops.CMPEQ: lambda a, b: int(a == b)}

def value(u: UOp, at: dict[UOp, int]) -> int:
  """An integer expression (an address, a gate) with the thread and loop indices at `at` (others 0), Variables
  at their least value and anything loaded at 0."""
  if u.op is Ops.CONST:
    return int(u.arg)
  if u.op in (Ops.SPECIAL, Ops.RANGE):
    return at.get(u, 0)
  if u.op is Ops.PARAM:
    return int(u.vmin)
  if u.op in (Ops.CAST, Ops.BITCAST):
    return value(u.src[0], at)
  if u.op is Ops.NEG:
    return -value(u.src[0], at)
  if u.op is Ops.WHERE:
    return value(u.src[1], at) if value(u.src[0], at) else value(u.src[2], at)
  return INTEGER[u.op](value(u.src[0], at), value(u.src[1], at)) if u.op in INTEGER else 0

def loads(code: list[UOp]) -> list[tuple[int, int, int, UOp, UOp | None, int]]:
  """Each load of a kernel argument: (its slot, its elements, elements per load, address, gate or None, trips
  around it)."""
  found, bounds = [], []
  for u in code:
    if u.op is Ops.RANGE:
      bounds.append(loop_trips(u.src[0]))
    elif u.op is Ops.END and bounds:
      bounds.pop()
    elif u.op is Ops.LOAD and u.src[0].op in (Ops.SHRINK, Ops.INDEX) and u.src[0].src[0].op is Ops.PARAM:
      where, arg = u.src[0], u.src[0].src[0]
      width = int(where.src[2].vmax) if where.op is Ops.SHRINK else 1
      found.append((arg.arg.slot, int(arg.src[0].vmax), width, where.src[1], u.src[2] if len(u.src) > 2 else None,
                    math.prod(bounds)))
  return found

def kernel(program: UOp, weights: dict[int, str]) -> Kernel:
  """A PROGRAM's launch, loops and reads of the weights, given as {argument slot: weight name}."""
  info, code = program.arg, list(program.src[1].src)
  sizes = [int(s) if not isinstance(s, UOp) else VARIABLE_TRIPS for s in info.global_size]
  threads = math.prod(sizes) * math.prod(info.local_size or (1,))
  special = {u.arg: u for u in code if u.op is Ops.SPECIAL}
  neighbour = special.get("lidx0", special.get("gidx0"))  # the thread index that moves fastest
  looped, by_weight = trips(code), {}
  for slot, size, width, address, gate, n in loads(code):
    if slot in weights:
      by_weight.setdefault(weights[slot], []).append((size, width, address, gate, n))
  reads, gathered = [], {}
  for name, found in by_weight.items():
    if looped or any(gate is None for _, _, _, gate, _ in found):  # a gather's loads have no loop, and a gate
      step = {value(a, {neighbour: 1}) - value(a, {neighbour: 0}) if neighbour is not None else 0
              for _, _, a, _, _ in found}
      loaded = threads * sum(w * n for _, w, _, _, n in found)
      reads.append(Read(name, threads, loaded / found[0][0], step, {w for _, w, _, _, _ in found}))
    else:
      gathered[name] = gated(found, list(special.values()))
  return Kernel(re.sub(r"\x1b\[[0-9;]*m", "", info.name), threads, looped, reads, gathered)

def gated(found: list, specials: list[UOp]) -> int:
  """Elements that loads with no loop around them read, over every thread, counting a gated load only where its
  gate holds (the tokens it gathers taken as 0)."""
  total = 0
  for index in itertools.product(*[range(int(s.src[0].vmax)) for s in specials]):
    at = dict(zip(specials, index))
    total += sum(width for _, width, _, gate, _ in found if gate is None or value(gate, at))
  return total

# ***** a compiled call's kernels, and the bars *****

def launched(call, values: list[int]) -> list[tuple[UOp, list]]:
  """The PROGRAMs one replay of a compiled call launches, in order, each with the buffers it is given (a fresh
  copy of the call without JIT graphs)."""
  from engine.compiled import Compiled
  with Context(JIT=2):
    alone = Compiled(call.name, call.signature, 0, call.build)
    for _ in range(3):  # compile, capture, replay
      alone(*values)
  return [(c.src[0], [b.buffer for b in c.src[1:]]) for c in alone.jit.captured.linear.src
          if c.src[0].op is Ops.PROGRAM]

def block(width: int, heads: int, rows: int, dtype) -> tuple[int, int]:
  """One block's kernels and the bytes of the buffers they bind (each kernel's, the KV cache whole), in a
  target step of `rows` rows: the difference between a target of 2 layers and one of 1 (GPT-2's vocabulary)."""
  from engine.compiled import prepare, step
  from sampling import Sampling
  from weights import random_model
  found = []
  for layers in (1, 2):
    model = random_model(f"{layers},{heads},{width}", dtype, seed=0)
    prepare(model)
    kernels = launched(step(model, rows, Sampling()), [5, *[1] * rows])
    found.append((len(kernels), sum(b.nbytes for _, buffers in kernels for b in buffers)))
  return found[1][0] - found[0][0], found[1][1] - found[0][1]

def matrices(*models) -> dict[int, tuple[str, int]]:
  """The models' weight matrices by their buffers (every layer's are the first layer's names): {id(buffer):
  (name, bytes)}. Buffers, not sizes: a partial sum or the position embedding may have a weight's size."""
  found: dict[int, tuple[str, int]] = {}
  for role, m in zip(("target", "draft"), models):
    for block in m.h:
      for name, w in (("c_attn", block.attn.c_attn.weight), ("attn.c_proj", block.attn.c_proj.weight),
                      ("c_fc", block.mlp.c_fc.weight), ("mlp.c_proj", block.mlp.c_proj.weight)):
        found[id(w.uop.buffer)] = (f"{role} {name}", w.nbytes())
    found[id(m.wte.weight.uop.buffer)] = (f"{role} wte", m.wte.weight.nbytes())
  return found

def faults(kernels: list[Kernel], weights: dict[int, tuple[str, int]], rows: int, width: int) -> list[str]:
  """What breaks the bars, one line each: an empty list passes. weights: those of the models the call runs
  (matrices); rows: the most rows a step of the call gathers; width: the widest embedding."""
  from engine.layout import ROWS
  out = [f"{k.name}: one thread runs {k.trips} loop trips" for k in kernels if k.trips > MAX_TRIPS]
  nbytes_of = dict(weights.values())
  streamed = set()
  for k in kernels:
    for r in k.reads:
      nbytes = nbytes_of[r.weight]
      if nbytes < 2**20:
        continue
      streamed.add(r.weight)
      if r.threads < min(32768, nbytes // 64):
        out.append(f"{k.name}: {r.weight} read by {r.threads} threads, under min(32768, {nbytes} B ÷ 64)")
      if r.strides != r.widths or len(r.widths) != 1:
        out.append(f"{k.name}: {r.weight}: neighbouring threads {r.strides} elements apart, {r.widths} a load")
      if r.times > -(-rows // ROWS) + 0.01:
        out.append(f"{k.name}: {r.weight} read {r.times:.2f} times")
    for name, elements in k.gathered.items():
      if "wte" in name and elements > rows * width:
        out.append(f"{k.name}: the gather reads {elements} elements of {name}, {rows * width} needed")
  missed = dict.fromkeys(name for name, nbytes in weights.values() if nbytes >= 2**20 and name not in streamed)
  return out + [f"no reduction reads {w}" for w in missed]

# ***** Metal's limits, checked without a Mac *****

METAL_THREADS, METAL_THREADGROUP_BYTES, METAL_BUFFERS = 1024, 32768, 31

def stand_in_metal_compiler() -> None:
  """Let tinygrad render Metal kernels on Linux (DEV=NULL:METAL). Its Metal renderer takes its compiler from
  tinygrad/runtime/ops_metal.py, which opens macOS's own libraries on import; this puts a module in its place
  whose compiler returns the source. Call it before tinygrad opens the device, with tinygrad's parallel
  compile workers off (PARALLEL=0): they would import the real module."""
  from tinygrad.device import Compiler
  class MetalCompiler(Compiler):
    def __init__(self):
      super().__init__(None)
    def compile(self, src: str) -> bytes:
      return src.encode()
  sys.modules["tinygrad.runtime.ops_metal"] = type(sys)("tinygrad.runtime.ops_metal")
  sys.modules["tinygrad.runtime.ops_metal"].MetalCompiler = MetalCompiler

def metal_sizes(program: UOp) -> tuple[int, int, int]:
  """A kernel rendered for Metal: its threads a threadgroup, its bytes of threadgroup memory, and its arguments
  (the kernel's signature, less the two thread indices)."""
  info, code, source = program.arg, program.src[1].src, program.src[2].arg
  shared = sum(int(u.src[0].vmax) * u.dtype.itemsize for u in code
               if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.LOCAL)
  arguments = [a for a in re.search(r"kernel void \w+\((.*?)\) \{", source).group(1).split(", ") if "[[" not in a]
  return math.prod(int(n) for n in info.local_size or (1,)), shared, len(arguments)

def metal_check(name: str, call, values: list[int], rows: int, models: list) -> list[str]:
  """A call's line for Metal (its kernels, and their most threads a threadgroup, bytes of threadgroup memory and
  buffers), then one line for each kernel over Metal's limits."""
  sizes = [(re.sub(r"\x1b\[[0-9;]*m", "", p.arg.name), metal_sizes(p)) for p, _ in launched(call, values)]
  limits = (METAL_THREADS, METAL_THREADGROUP_BYTES, METAL_BUFFERS)
  found = [f"{kernel}: {n} {what}, over {limit}" for kernel, sized in sizes
           for n, limit, what in zip(sized, limits, ("threads a threadgroup", "bytes of threadgroup memory", "buffers"))
           if n > limit]
  most = [max(sized[i] for _, sized in sizes) for i in range(3)]
  return [f"{name}: {len(sizes)} kernels, at most {most[0]} threads a threadgroup, {most[1]} bytes of threadgroup "
          f"memory and {most[2]} buffers, {len(found)} faults", *[f"  {f}" for f in found]]

def calls(target, draft, K: int, sampling) -> list[tuple[str, object, list[int], int, list]]:
  """Algorithm 1's step, a model draft's round and a prompt-lookup round: (name, compiled call, values, rows,
  the models it runs)."""
  from speculative import lookup_round, model_round, token_step
  return [("Algorithm 1's step", token_step(target, sampling), [5, 0, 0, 8], 1, [target]),
          (f"a round, K={K}", model_round(target, draft, K, sampling), [4, 1, 1, 2, K, 0, 0, 5], K + 1,
           [target, draft]),
          (f"a lookup round, K={K}", lookup_round(target, K, sampling), [1] * (K + 1) + [K, 0, 0, 8], K + 1,
           [target])]

def check(name: str, call, values: list[int], rows: int, models: list) -> list[str]:
  """A call's line (its kernels, those over the trip bar, its faults), then one line a fault."""
  weights = matrices(*models)
  kernels = [kernel(p, {slot: weights[id(b)][0] for slot, b in enumerate(buffers) if id(b) in weights})
             for p, buffers in launched(call, values)]
  found = faults(kernels, weights, rows, max(m.config.n_embd for m in models))
  return [f"{name}: {len(kernels)} kernels, {sum(k.trips > MAX_TRIPS for k in kernels)} over {MAX_TRIPS} loop "
          f"trips a thread, {len(found)} faults", *[f"  {f}" for f in found]]

if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from engine.compiled import prepare
  from sampling import Sampling
  from weights import random_model
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--target", default="gpt2-xl")
  ap.add_argument("--draft", default="gpt2")
  ap.add_argument("-K", type=int, default=4)
  ap.add_argument("--half", action="store_true")
  ap.add_argument("--top-k", type=int, default=0)
  ap.add_argument("--top-p", type=float, default=1.0)
  ap.add_argument("--metal", action="store_true", help="Metal's limits instead (run with DEV=NULL:METAL PARALLEL=0)")
  args = ap.parse_args()
  if args.metal:
    stand_in_metal_compiler()
  dtype = dtypes.float16 if args.half else dtypes.float32
  target, draft = random_model(args.target, dtype, seed=0), random_model(args.draft, dtype, seed=1)
  prepare(target), prepare(draft)
  for found in calls(target, draft, args.K, Sampling(1.0, args.top_k, args.top_p)):
    print("\n".join((metal_check if args.metal else check)(*found)), flush=True)
