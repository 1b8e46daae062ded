"""GPT-2 in tinygrad, with a preallocated KV cache and compiled steps.

One call does everything the rest of the project needs:

    logits = model(ids, start_pos)  # ids: T token ids at positions start_pos .. start_pos+T-1
                                    # logits: NumPy float32 (T, vocab), the next-token logits at each
    probs = model(ids, start_pos, last=3, head=f)  # f(the last 3 positions' logits), inside the compiled call

It writes those T positions into the cache. Rolling back is calling again with a smaller start_pos: positions
at or past it are overwritten before they are read. model.logits(idx) is train.py's forward, with no cache.
"""
from __future__ import annotations
import ctypes, hashlib, math, os, pathlib
from dataclasses import dataclass
from typing import Callable
import numpy as np
from tinygrad import Context, Device, Tensor, TinyJit, UOp, Variable, dtypes, nn
from tinygrad.helpers import BEAM, diskcache_get, diskcache_put
from tinygrad.uop.ops import Ops

@dataclass(frozen=True)
class GPT2Config:
  n_layer: int = 12
  n_head: int = 12
  n_embd: int = 768
  vocab_size: int = 50257
  n_ctx: int = 1024
  norm_eps: float = 1e-5

  def __post_init__(self):
    sizes = (self.n_layer, self.n_head, self.n_embd, self.vocab_size, self.n_ctx)
    if not all(type(n) is int and n > 0 for n in sizes):
      raise ValueError("n_layer, n_head, n_embd, vocab_size and n_ctx must be positive integers.")
    if self.n_embd % self.n_head:
      raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}: "
                       "every head needs the same width.")

# The four sizes OpenAI released, as named on the Hugging Face Hub.
PRESETS = {
  "gpt2":        GPT2Config(n_layer=12, n_head=12, n_embd=768),    # 124M
  "gpt2-medium": GPT2Config(n_layer=24, n_head=16, n_embd=1024),   # 355M
  "gpt2-large":  GPT2Config(n_layer=36, n_head=20, n_embd=1280),   # 774M
  "gpt2-xl":     GPT2Config(n_layer=48, n_head=25, n_embd=1600),   # 1.5B
}

# Calls of 2 or more tokens run in compiled steps of `rows` rows (K+1 in speculative sampling), the last block
# padded with rows whose results are dropped: every call of up to `rows` tokens replays one step.
BLOCK = 8      # the default rows
MAX_ROWS = 64  # the widest step: the KV cache keeps MAX_ROWS - 1 spare positions for the padding rows

def width(rows: int, searched: bool) -> int:
  """The rows a pass of `rows` tokens runs at, the layout of every compiled step and round. tinygrad's default
  kernels read a weight once for all rows only when 3 or 4 divides them, else once per row, so a pass of 3 or
  more rows runs padded to the next such number (5 rows to 6, 7 to 8). Timed alone on this project's 2-core
  CPU (BEAM=0): gpt2's 5 rows 344 ms unpadded, 207 ms padded to 6, 283 ms to 8; the demo target's 68.6, 50.7
  and 71.1 ms. 1 and 2 rows run as they are (the demo pair's 2 rows padded to 4: 8 to 13 % slower). A searched
  kernel picks its own layout for the real rows: no padding."""
  if searched or rows <= 2:
    return rows
  return next(w for w in range(rows, MAX_ROWS + 1) if w % 3 == 0 or w % 4 == 0)

# Kernel search: BEAM times candidate layouts of each kernel and keeps the fastest (2 to 3 times faster than
# the default kernels on a CPU), but takes minutes per step. So no call searches: a step compiles with default
# kernels until Compiled.search has searched it on this machine (kept in ~/.cache/tinygrad). BEAM=0: no search;
# BEAM=N: N candidates kept at each stage of the search, by default 4 on a GPU (an H100's gpt2-xl step of 5 rows
# then cost 1.41 times one row, against 1.78 at 2, for 134 s of search instead of 74) and 2 where the kernels run
# on this machine's CPU, whose searches are slower.
SEARCH = int(os.environ["BEAM"]) if "BEAM" in os.environ else None
BEAM.value = 0  # tinygrad reads BEAM too: outside Compiled.search (loading, training, sampling) nothing searches

def on_host_cpu(device: str) -> bool:
  """Whether the device's kernels run on this machine's CPU: tinygrad's CPU device, or an OpenCL driver for the
  CPU (pocl), told apart from an OpenCL GPU by the device type that OpenCL reports, not by a name."""
  if device.split(":")[0] != "CL":
    return device.split(":")[0] == "CPU"
  from tinygrad.runtime.autogen import opencl as cl
  kind = ctypes.c_uint64()
  cl.clGetDeviceInfo(Device[device].cl_dev, cl.CL_DEVICE_TYPE, ctypes.sizeof(kind), ctypes.byref(kind), None)
  return bool(kind.value & cl.CL_DEVICE_TYPE_CPU)

def search_width(device: str) -> int:
  """How wide a search of the kernels is on the device: BEAM if set, else as above; 0 on DEV=NULL, which runs
  no kernel to time."""
  return 0 if device == "NULL" else SEARCH if SEARCH is not None else 2 if on_host_cpu(device) else 4
# what a step's kernels depend on besides its shape: this file and the sampling heads
SOURCE = hashlib.sha256(b"".join((pathlib.Path(__file__).parent / f).read_bytes()
                                 for f in ("gpt2.py", "sampling.py"))).hexdigest()[:16]

def read(out: Tensor, into: np.ndarray) -> np.ndarray:
  """Copy a compiled step's result out of the device's own buffer into the host array `into`, and return it.

  The copy goes straight from the device's buffer, on every device: not by .to("CPU"), as opening tinygrad's
  CPU device compiles with clang, which a GPU machine may lack; and not by Buffer.as_memoryview() or .numpy(),
  which in tinygrad 0.14 copy through a fresh host buffer each time (0.28 ms a call on DEV=NULL, against
  0.05 ms for this copy into an array allocated once)."""
  buf = out.uop.buffer
  buf.allocator._copyout(memoryview(into).cast("B"), buf._buf)
  return into

def symbolic_ids(ids: tuple[UOp, ...]) -> Tensor:
  """Token ids given as Variables, as the int32 Tensor that forward takes: numbers bound at each call."""
  return Tensor.cat(*[Tensor.full((1,), i, dtype=dtypes.int32) for i in ids])

def causal_mask(T: int, start_pos: int | UOp) -> Tensor | None:
  """The attention mask of T queries at positions start_pos..: -inf where query i (at start_pos+i) may not see
  a key, one past start_pos+i. None for one query, which sees every key in the cache."""
  return Tensor.full((1, 1, T, start_pos + T), float("-inf")).triu(start_pos + 1) if T > 1 else None

class Attention:
  def __init__(self, cfg: GPT2Config):
    self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
    self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)  # q, k, v for all heads in one matmul
    self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
    self.cache_kv: Tensor | None = None  # (2, 1, n_head, n_ctx + MAX_ROWS - 1, head_dim), made on first use

  def __call__(self, x: Tensor, start_pos: int | UOp | None, mask: Tensor | None = None) -> Tensor:
    B, T, C = x.shape
    qkv = self.c_attn(x).split(C, dim=2)
    q, k, v = [t.reshape(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in qkv]
    if start_pos is None:  # training: a whole sequence at once, no cache
      y = q.scaled_dot_product_attention(k, v, is_causal=True)
      return self.c_proj(y.transpose(1, 2).reshape(B, T, C))
    # write this step's keys and values at start_pos .. start_pos+T-1; anything past them is stale, never read
    self.cache_kv[:, :, :, start_pos:start_pos + T].assign(Tensor.stack(k, v))
    k, v = self.cache_kv[0, :, :, :start_pos + T], self.cache_kv[1, :, :, :start_pos + T]
    scores = q.matmul(k.transpose(2, 3), dtype=dtypes.float32) / math.sqrt(self.head_dim)
    mask = causal_mask(T, start_pos) if mask is None else mask  # forward passes one for all layers
    if mask is not None:
      scores = scores + mask
    # softmax(scores) @ v, dividing by the softmax's sum after the product, in its epilogue (T × head_dim
    # divisions): exp(scores - max) then reads only two buffers, which tinygrad computes inside the product's
    # load instead of writing it out (3 kernels: max, sum, product; softmax first took 4). y is written out:
    # left to c_proj, its division would be redone in c_proj's load for every output column
    e = (scores - scores.max(-1, keepdim=True)).exp()
    y = ((e @ v.float()) / e.sum(-1, keepdim=True)).cast(x.dtype).contiguous()
    return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

class LayerNorm:
  """GPT-2's layer norm, in one kernel (but on the CPU device): the statistics of x, then the normalisation done
  inside the next matmul's load. tinygrad computes an elementwise result inside its consumer, instead of writing
  it out, only when it reads at most 3 buffers: here x, its statistics and this norm's parameters. So both
  statistics come from one kernel, and GPT2.prepare packs weight and bias into the rows of one buffer."""
  def __init__(self, C: int, eps: float):
    self.weight, self.bias, self.eps = Tensor.ones(C), Tensor.zeros(C), eps

  def __call__(self, x: Tensor) -> Tensor:
    # E[x] and 1/sqrt(var + eps) in one kernel, var = E[x²] - E[x]² in float32 (in float16, x² overflows past
    # 256; rounding can take it below 0 when var is near 0): the load that normalises then takes no square root
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    rstd = ((xf * xf).mean(-1, keepdim=True) - mean * mean).maximum(0).add(self.eps).rsqrt()
    mean, rstd = Tensor.stack(mean, rstd).contiguous()
    normalised = ((xf - mean) * rstd * self.weight + self.bias).cast(x.dtype)
    # Inside the matmul's load it is redone for every output column: on tinygrad's CPU device, where arithmetic
    # is scarce, that made a 5-row step's matmuls up to 1.5 times slower, so there it is written out once
    return normalised.contiguous() if x.device == "CPU" else normalised

  def pack(self) -> None:
    """Make weight and bias the two rows of one buffer (a load replaces them: it unpacks them, still correct)."""
    both = Tensor.stack(self.weight, self.bias).contiguous().realize()
    self.weight, self.bias = both[0], both[1]

class MLP:
  def __init__(self, cfg: GPT2Config):
    self.c_fc, self.c_proj = nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.Linear(4 * cfg.n_embd, cfg.n_embd)

  def __call__(self, x: Tensor) -> Tensor:
    return self.c_proj(self.c_fc(x).gelu())  # GPT-2's gelu is the tanh approximation, as is tinygrad's

class Block:
  def __init__(self, cfg: GPT2Config):
    self.ln_1, self.attn = LayerNorm(cfg.n_embd, cfg.norm_eps), Attention(cfg)
    self.ln_2, self.mlp = LayerNorm(cfg.n_embd, cfg.norm_eps), MLP(cfg)

  def __call__(self, x: Tensor, start_pos: int | UOp | None, mask: Tensor | None = None) -> Tensor:
    x = x + self.attn(self.ln_1(x), start_pos, mask)  # pre-norm residual blocks, as in GPT-2
    return x + self.mlp(self.ln_2(x))

Head = Callable[[Tensor], Tensor]  # maps a step's (rows, vocab) logits to its result, e.g. sampling.Sampling

class Compiled:
  """A function of Variables compiled by TinyJit (its first two calls run, then capture it); every later call
  replays its kernels, and its host work is binding numbers and one launch. build(searched) gives the function
  and its Variables. Its kernels are tinygrad's default ones until search() has searched them on this machine,
  which is remembered on disk under its signature, so that later processes compile them searched at once."""
  def __init__(self, name: str, signature: str, width: int,
               build: Callable[[bool], tuple[Callable[..., Tensor], list[UOp]]]):
    self.name, self.signature, self.width, self.build = name, signature, width, build
    self.searched = bool(width) and bool(diskcache_get("tinyspec_searched", signature))
    self.jit, self.variables = self.compile()
    self.host: np.ndarray | None = None  # the result's host array, for to_host

  def compile(self) -> tuple[TinyJit, list[UOp]]:
    fn, variables = self.build(self.searched)
    return TinyJit(fn), variables

  def __call__(self, *values: int) -> Tensor:
    """Run or replay it with its Variables bound to values (missing ones 0): its result, on the device."""
    values = (*values, *[0] * (len(self.variables) - len(values)))
    with Context(BEAM=self.width if self.searched and self.jit.cnt < 2 else 0):  # searched: from the cache
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
    with Context(BEAM=self.width):
      for _ in range(2):  # run, then capture: both compile
        self()
    diskcache_put("tinyspec_searched", self.signature, True)

class GPT2:
  def __init__(self, cfg: GPT2Config):
    self.config = cfg
    self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.n_ctx, cfg.n_embd)
    self.h = [Block(cfg) for _ in range(cfg.n_layer)]
    self.ln_f = LayerNorm(cfg.n_embd, cfg.norm_eps)
    self.steps: dict[tuple[int, Head | None], Compiled] = {}  # by (rows, head)
    self.rounds: dict[tuple, Compiled] = {}  # speculative.py's compiled calls with this model as the target
    self.search = search_width(Device.DEFAULT)

  def prepare(self) -> None:
    """Once, before the first compiled step: allocate the zeroed KV caches that compiled steps point at (stale
    entries are never cleared), and pack each layer norm's parameters into one buffer (see LayerNorm)."""
    if self.h[0].attn.cache_kv is not None:
      return
    cfg, w = self.config, self.wte.weight
    shape = (2, 1, cfg.n_head, cfg.n_ctx + MAX_ROWS - 1, cfg.n_embd // cfg.n_head)
    for block in self.h:
      block.attn.cache_kv = Tensor.zeros(*shape, dtype=w.dtype, device=w.device).contiguous().realize()
    for norm in [self.ln_f] + [n for block in self.h for n in (block.ln_1, block.ln_2)]:
      norm.pack()

  def forward(self, ids: Tensor, start_pos: int | UOp) -> Tensor:
    """Float32 logits (T, vocab) after each of the T token ids (an int32 Tensor) at start_pos.. . No JIT: this
    is what a compiled call runs, with start_pos symbolic and the ids bound numbers or tokens drawn on the
    device."""
    T = ids.shape[0]
    x = self.wte.weight[ids].unsqueeze(0)  # a gather: reads T rows of the embedding, not all of it
    # a step's padding rows may sit past the context's end: give them zero position embeddings there
    x = x + self.wpe.weight.pad(((0, MAX_ROWS - 1), None))[start_pos:start_pos + T]
    mask = causal_mask(T, start_pos)  # one Tensor for all layers, one kernel (made in each, a kernel per layer)
    for block in self.h:
      x = block(x, start_pos, mask)
    # The LM head is tied to the token embedding, over 50304 tokens, not 50257 (a prime, which no thread count
    # divides); contiguous() before dropping the extra ones, or a lazy slice would shrink the matmul back.
    V = self.config.vocab_size
    logits = (self.ln_f(x[0]) @ self.wte.weight.pad(((0, -V % 64), None)).T).contiguous()[:, :V]
    return logits.cast(dtypes.float32)

  def logits(self, idx: Tensor) -> Tensor:
    """Training's forward: logits (B, T, vocab) for the token ids idx (B, T) at positions 0..T-1, no cache."""
    x = self.wte(idx) + self.wpe.weight[:idx.shape[1]]
    for block in self.h:
      x = block(x, None)
    return self.ln_f(x) @ self.wte.weight.T

  def forward_rows(self, ids: Tensor, start_pos: int | UOp, head: Head | None, searched: bool) -> Tensor:
    """head(logits) after each of the T token ids at start_pos.., run at width(T, searched) rows: what every
    compiled step and round runs, so that a step timed alone launches the kernels a round launches. Its result
    has all the rows, realized as one buffer: slicing the padding away before then could shrink the matmuls
    back to T rows, another layout. The padding rows (token 0) come after the real ones, so that causal
    attention keeps them out of the real rows; their keys and values land at start_pos+T.., past every real
    position, where the next call writes before it reads (also at K = 63 with the prompt two tokens before
    the context's end: the cache's MAX_ROWS - 1 spare positions hold them)."""
    T = ids.shape[0]
    logits = self.forward(ids.pad(((0, width(T, searched) - T),)), start_pos)
    return (logits if head is None else head(logits)).contiguous()

  def signature(self) -> str:
    """What its compiled calls' kernels depend on besides their shape."""
    w = self.wte.weight
    return f"{self.config}|{w.dtype}|{w.device}|BEAM={self.search}|{SOURCE}"

  def step(self, rows: int, head: Head | None) -> Compiled:
    """The compiled call on `rows` tokens: Variables start_pos and one id per row, result head(logits) for
    width(rows) rows (forward_rows; those past the tokens given are padding)."""
    if (rows, head) not in self.steps:
      def build(searched: bool) -> tuple[Callable[..., Tensor], list[UOp]]:
        def run(start_pos: UOp, *ids: UOp) -> Tensor:
          return self.forward_rows(symbolic_ids(ids), start_pos, head, searched)  # stays on the device: see read
        variables = [Variable("start_pos", 0, self.config.n_ctx - 1)]
        return run, variables + [Variable(f"id{t}", 0, self.config.vocab_size - 1) for t in range(rows)]
      name = f"{self.config.n_layer} layers, {rows} rows"
      signature = f"{self.signature()}|rows={rows}|{head!r}"
      self.steps[(rows, head)] = Compiled(name, signature, self.search, build)
    return self.steps[(rows, head)]

  def unsearched(self) -> list[Compiled]:
    """The compiled calls this model runs with default kernels, where the search is on."""
    return [c for c in self.steps.values() if not c.searched] if self.search else []

  def __call__(self, ids: list[int], start_pos: int, last: int | None = None, head: Head | None = None,
               rows: int = BLOCK) -> np.ndarray:
    """Next-token logits (last, vocab), NumPy float32, after the last `last` (default: all) of ids, fed at
    positions start_pos.., writing them into the KV cache; with head, head(logits) instead. One token runs as
    a one-row step, more in blocks of `rows` (the last one padded): each block replays one compiled step."""
    cfg, T = self.config, len(ids)
    last = T if last is None else last
    if not (0 <= start_pos and start_pos + T <= cfg.n_ctx):
      raise ValueError(f"positions {start_pos}..{start_pos + T - 1} fall outside the context of {cfg.n_ctx}")
    if not all(0 <= i < cfg.vocab_size for i in ids):
      raise ValueError(f"token ids must be in 0..{cfg.vocab_size - 1}")
    if not 1 <= last <= T:
      raise ValueError(f"last is {last}: it must be in 1..{T}, the number of tokens")
    if not 1 <= rows <= MAX_ROWS:
      raise ValueError(f"rows is {rows}: it must be in 1..{MAX_ROWS}")
    self.prepare()
    rows, out = 1 if T == 1 else rows, []
    step = self.step(rows, head)
    for b in range(0, T, rows):
      block = ids[b:b + rows]
      result = step(start_pos + b, *block)
      if b + len(block) > T - last:  # it holds some of the last `last` tokens: copy their rows out of the
        host = step.to_host(result)                      # step's host array, which its next read overwrites
        out.append(host[max(T - last - b, 0):len(block)].copy())
    return out[0] if len(out) == 1 else np.concatenate(out)
