"""How gpt2.py's products, layer norms and softmax become kernels: the same math as plain GPT-2, laid out so that a
decode step launches few kernels, each shaped as a GPU wants it. A first reading can skip this file: gpt2.py reads
as GPT-2 without it, and on tinygrad's CPU device most of it changes nothing (a product there is nn.Linear's own
x.linear(weight.T, bias), and fused leaves its Tensor as it is).

    Linear, product(x, w, b)   nn.Linear: x @ w.T + b, summed in float32
    fused(t)                   t (one product and the elementwise work around it) computed by one kernel
    LayerNorm                  GPT-2's layer norm: its statistics in one kernel, x normalised in the next load
    attend(scores, v)          softmax(scores) @ v, the heads side by side
    lm_head(x, wte)            the tied LM head, over the vocabulary padded to a multiple of 64

Why. A decode step reads each weight once and does two flops a weight, so on a GPU its time is its bytes over the
memory's bandwidth plus an overhead for every kernel it launches, the ramp up and down of each, even inside a
CUDA graph (an estimate from one run: docs/gpu.md). So a block is 10 kernels:
ln_1's statistics; q, k, v; the KV write; the scores; their max; their softmax times v; c_proj, adding the
residual; ln_2's statistics; c_fc, with gelu; c_proj, adding the residual. Each product is one kernel that reads
its weight once for all the rows of a call (K + 1 in a round), by tens of thousands of threads at neighbouring
addresses, its sums shared by the threads of a workgroup: no partial sums written out and read back.

How, in tinygrad 0.14 (pinned in requirements.txt). tinygrad lays each kernel out by its opts (which loops
become threads, workgroups, registers), chosen by a heuristic whose matrix-vector rule does not fire on these
products (a float16 product summed in float32 puts a cast between the multiply and the sum; the layer norm sits
in the load; several rows add a loop the weight's index lacks) and, where it does, leaves a large weight to too
few threads. So fused gives the kernel its opts (sum_opts): tinygrad applies a CONTIGUOUS's arg, a tuple of
Opts, to the kernel that computes it (tinygrad/schedule/rangeify.py, get_contiguous, to KernelInfo.opts_to_apply),
but only for a CONTIGUOUS made inside a tinygrad.function: outside one it turns the CONTIGUOUS into a store first,
and the opts are dropped. What it costs: these kernels skip tinygrad's own opts and its BEAM search (--search
leaves them as they are); an opt that does not fit raises KernelOptError when the kernel compiles; and it relies
on that path of tinygrad's scheduler, which tests/test_kernels.py watches (a product's threads and addresses, and
10 kernels a block at GPT-2's widths, compiled for an H100 with no GPU; its control drops the opts). What it
bought, counted so: docs/engine.md.
"""
from __future__ import annotations
import math
from tinygrad import Context, Device, Tensor, UOp, dtypes, nn
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.function import function
from tinygrad.uop.ops import Ops

# ***** the products: nn.Linear and the LM head, each one kernel on a GPU *****

# A compiled call may run more rows than it has tokens (compiled.padded_rows pads them): gpt2.py's KV cache keeps
# MAX_ROWS - 1 spare positions past the context for the padding rows of the widest call, MAX_ROWS rows
MAX_ROWS = 64

def workgroups(device: str) -> bool:
  """Whether the device runs threads in workgroups (a GPU; OpenCL): there each product is one kernel laid out by
  fused. tinygrad's CPU device runs a thread per core."""
  return Device[device].renderer.has_local

def product(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
  """x @ weight.T + bias, for x (..., C) and weight (O, C), nn.Linear's layout, summed in float32."""
  if not workgroups(weight.device):
    return x.linear(weight.T, bias)
  y = (x.unsqueeze(-2) * weight).sum(-1, dtype=dtypes.float32)
  return (y if bias is None else y + bias).cast(weight.dtype)

class Linear(nn.Linear):
  """nn.Linear, weight (out, in) and bias, as product: unwritten, so that fused can add what follows it."""
  def __call__(self, x: Tensor) -> Tensor:
    return product(x, self.weight, self.bias)

ROWS = 16  # the most rows one thread of fused's kernels computes, holding U sums for each in registers

def fused(t: Tensor) -> Tensor:
  """t, computed by one kernel and written out: t holds one product, with the elementwise work before it (a layer
  norm's normalisation, in its load) and after it (a bias, a residual, gelu). On a GPU the kernel's opts lay it
  out (sum_opts); elsewhere, and where t holds more than one sum since what is written (notebook 02 feeds the
  blocks an embedding it has not written), tinygrad's default kernels."""
  if not workgroups(t.device) or len(sums := sums_in(t)) != 1:
    return t
  *lead, O = t.shape
  R, C = math.prod(lead), math.prod(sums[0].src[0].shape) // math.prod(sums[0].shape)
  blocks = -(-R // ROWS)  # blocks of at most ROWS rows, each reading the weight once, each padded to `rows` rows
  rows = -(-R // blocks)
  opts = sum_opts(blocks, rows, O, C, t.device)
  padded = t.reshape(R, O).pad(((0, blocks * rows - R), None))
  # opts reach a kernel as its CONTIGUOUS's arg only inside a tinygrad.function: outside one, tinygrad 0.14
  # drops them when it turns the CONTIGUOUS into a store
  return function(lambda padded: padded.contiguous(arg=opts))(padded)[:R].reshape(*lead, O)

WRITTEN = {Ops.CONTIGUOUS, Ops.BUFFER, Ops.AFTER, Ops.FUNCTION, Ops.CALL}  # the lazy graph's written Tensors

def sums_in(t: Tensor) -> list[UOp]:
  """The sums t is computed from since what is written, less those that read no memory (an arange's)."""
  def inside(u: UOp) -> list[UOp]:  # what u is computed from, back to (not including) what is written
    return list(u.toposort(gate=lambda u: u.op not in WRITTEN))
  return [u for u in inside(t.uop) if u.op is Ops.REDUCE and any(s.op in WRITTEN for v in inside(u) for s in v.src)]

def sum_opts(blocks: int, rows: int, O: int, C: int, device: str) -> tuple[Opt, ...]:
  """The opts of a kernel computing blocks × rows rows of O outputs, each a sum of C products (layout_of picks G,
  u and U), and what each buys and costs:

    UNROLL u     a thread loads u neighbouring inputs at once, its neighbour the next u: the weight's rows are
                 read at neighbouring addresses, u at a time
    GROUP G      G threads of a workgroup share each sum, each adding C / (G·u) loads: enough threads to keep a
                 GPU's memory busy; then the G partial sums meet in local memory (a barrier and G more adds)
    UPCAST U     a thread computes U outputs: each input it loads serves U rows of the weight
    UPCAST rows  a thread computes them for every row of its block, so that a block reads the weight once, at
                 the price of rows × U sums held in registers: hence ROWS, and blocks beyond it (a workgroup
                 each, each reading the weight again)

  The kernel's axes, before them: its blocks × rows rows where more than one, its outputs, then the sum; the
  last UPCAST splits the first into blocks and rows."""
  G, u, U = layout_of(O, C, Device[device].renderer.shared_max // (4 * rows))
  opts = [Opt(OptOps.UNROLL, 0, u)] if u > 1 else []
  opts += [Opt(OptOps.GROUP, 0, G)] if G > 1 else []
  opts += [Opt(OptOps.UPCAST, int(blocks * rows > 1), U)] if U > 1 else []
  return tuple(opts + ([Opt(OptOps.UPCAST, 0, rows)] if rows > 1 else []))

THREADS = 32768  # a GPU keeps its memory busy only with tens of thousands of loads in flight

def layout_of(O: int, C: int, local: int) -> tuple[int, int, int]:
  """(G, u, U) for O sums of C products: the first, in order of G = 32, 64, 128, 256 threads a sum, then u = 4,
  2, 1 inputs a load, then U = 4, 2, 1 outputs a thread, whose O/U · G threads reach THREADS, else the one with
  the most threads; G · U at most `local` (the floats of local memory a row may take). Where C is no multiple
  of 32, G is the largest power of two dividing it."""
  Gs = [G for G in (32, 64, 128, 256) if C % G == 0] or [math.gcd(C, 32)]
  fits = [(G, u, U) for G in Gs for u in (4, 2, 1) for U in (4, 2, 1)
          if C % (G * u) == 0 and O % U == 0 and G * U <= local]
  return next((f for f in fits if O // f[2] * f[0] >= THREADS), max(fits, key=lambda f: O // f[2] * f[0]))

def padded_vocab(V: int) -> int:
  """The vocabulary as the device sees it: V rounded up to a multiple of 64, with tokens that never occur (logit
  -inf, probability 0). GPT-2's 50257 = 29 × 1733, so a GPU would run every sum over it (the softmax, top-k and
  top-p's passes, p(x̃) and q(x̃), the draws' totals) as 29 threads of 1733 steps; tinygrad splits a sum over
  50304 = 192 × 262 into 192 threads of 262 steps, then one of 192."""
  return V + -V % 64

def lm_head(x: Tensor, wte: Tensor) -> Tensor:
  """The LM head tied to the token embedding wte (V, C): float32 logits x @ wte.T for x (T, C), over
  padded_vocab(V) tokens, -inf for the padding ones."""
  V = wte.shape[0]
  logits = product(x, wte.pad(((0, padded_vocab(V) - V), None))).float()
  return fused((Tensor.arange(logits.shape[-1]) < V).where(logits, float("-inf")))

# ***** the layer norm and the softmax, in as few kernels as tinygrad allows *****

class LayerNorm:
  """GPT-2's layer norm, (x - E[x]) / sqrt(var + eps) · weight + bias, in one kernel (two when written): the
  statistics of x, then the normalisation done inside the next matmul's load (it took 3 kernels: mean, variance,
  normalisation). tinygrad computes an elementwise result inside its consumer, instead of writing it out, only
  when it reads at most 3 buffers (remove_bufferize in tinygrad/schedule/rangeify.py): here x, its statistics and
  this norm's parameters. So both statistics come from one kernel, and prepare packs weight and bias into the
  rows of one buffer (tests/test_kernels.py's control leaves them apart: a kernel more per layer norm)."""
  def __init__(self, C: int, eps: float):
    self.weight, self.bias, self.eps = Tensor.ones(C), Tensor.zeros(C), eps
    self.written = False  # whether the normalised x is written out (prepare sets it)
    self.packed = False   # whether prepare has packed weight and bias

  def __call__(self, x: Tensor) -> Tensor:
    # E[x] and E[x²] in one kernel, as one sum over the pair stacked (a GPU splits it over a workgroup's
    # threads, 16 of 100 steps at gpt2-xl's width; two sums in one kernel would leave the first to one thread per
    # row); var = E[x²] - E[x]² in float32 (in float16, x² overflows past 256; rounding can take it below 0 when
    # var is near 0), its root taken in the load that normalises
    xf = x.float()
    mean, square = Tensor.stack(xf, xf * xf).mean(-1, keepdim=True).contiguous()
    rstd = (square - mean * mean).maximum(0).add(self.eps).rsqrt()
    normalised = ((xf - mean) * rstd * self.weight + self.bias).cast(x.dtype)
    # Inside the matmul's load it is redone for every output column: where arithmetic is scarce (tinygrad's CPU
    # device: docs/engine.md), compiled calls have it written out once instead
    return normalised.contiguous() if self.written else normalised

  def prepare(self, written: bool) -> None:
    """Before the first forward (GPT2.prepare): whether the normalised x is written out (compiled.prepare: on
    tinygrad's CPU device), and weight and bias packed, once: the compiled calls point at that buffer."""
    self.written = written
    if not self.packed:
      with Context(BEAM=0):  # a copy is not worth a kernel search
        self.pack()
      self.packed = True

  def pack(self) -> None:
    """Make weight and bias the two rows of one buffer (a load replaces them: it unpacks them, still correct)."""
    both = Tensor.stack(self.weight, self.bias).contiguous().realize()
    self.weight, self.bias = both[0], both[1]

def attend(scores: Tensor, v: Tensor) -> Tensor:
  """softmax(scores) @ v for scores (B, H, T, S) and v (B, H, S, D), in v's dtype, the heads side by side as
  c_proj reads them: (B, T, H·D). exp(scores - max) is summed twice over the keys in one kernel, against v and
  alone (each output column adds up its own copy of the softmax's sum), so that attention takes 3 kernels after
  the KV write: the scores, their max, this one (a separate sum took 4). Written out, each row's inputs side by
  side (one sum over them in c_proj's kernel, not one a head); left to c_proj, the division would be redone in
  its load for every output column."""
  B, H, T, D = *scores.shape[:3], v.shape[-1]
  e = (scores - scores.max(-1, keepdim=True)).exp().unsqueeze(-1)  # (B, H, T, S, 1)
  y = (e * v.float().unsqueeze(-3)).sum(-2) / e.expand(*e.shape[:-1], D).sum(-2)
  return y.cast(v.dtype).transpose(1, 2).reshape(B, T, H * D).contiguous()
