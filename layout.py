"""How gpt2.py's products, layer norms and softmax are laid out in kernels: the same math as plain GPT-2, written
so that tinygrad's default kernels (BEAM=0, nothing of tinygrad's patched) run it as a GPU wants and as few
kernels as a decode step can take. gpt2.py calls it as nanoGPT's model.py calls flash attention.

    Linear, LayerNorm      nn.Linear (products run as matvec) and GPT-2's layer norm
    attend(scores, v)      softmax(scores) @ v
    lm_head(x, wte)        the tied LM head, over the vocabulary padded to a multiple of 64

Why, in numbers. A decode step is bound by its number of kernels as much as by its bytes (each launch has a ramp
up and down): on an H100 (float16, searched) gpt2-xl first took 3.6 ms a token for a 1.06 ms floor, with 16
kernels a block; the layer norm and attention below make it 11 (a gpt2-xl step of one row 780 -> 538 kernels,
gpt2's 204 -> 142, tests/test_kernels.py). And compiled for an H100 (DEV=NULL:CUDA:sm_90, tests/gpu_layout.py),
Algorithm 1's token once ran 103 kernels with a thread looping over 1024 times (every sum over GPT-2's 50257
tokens as 29 threads of 1733 steps; each layer norm's mean summed by each of 32 threads alone; the draw's walk of
its CDF, which speculative.py now writes out) and read 193 weights with too few threads, none of them coalesced
(the MLP's first product: 20.5 MB read by 1600 threads, neighbours 12,800 bytes apart); laid out as below, 0 and
0, in 745 kernels instead of 549. On tinygrad's CPU device (no workgroups: a thread per core, each streaming
whole rows) a product stays x.linear(weight.T, bias), and the layer norm writes its result out (LayerNorm).
"""
from __future__ import annotations
import math
from tinygrad import Context, Device, Tensor, UOp, dtypes, nn
from tinygrad.codegen.opt import Opt, OptOps
from tinygrad.function import function
from tinygrad.uop.ops import Ops

# ***** the products: nn.Linear and the LM head, each one kernel on a GPU *****

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

ROWS = 16  # the most rows a thread of fused's kernels computes: it holds a sum for each, and each adds registers

def fused(t: Tensor) -> Tensor:
  """t, computed by one kernel and written out: t holds one product, with the elementwise work before it (a layer
  norm's normalisation, in its load) and after it (a bias, a residual, gelu). On a GPU the kernel's opts lay it
  out (sum_opts); elsewhere, tinygrad's default kernels."""
  if not workgroups(t.device):
    return t
  *lead, O = t.shape
  R = math.prod(lead)
  blocks = -(-R // ROWS)  # blocks of at most ROWS rows, each read the weight once, padded to `rows` rows each
  rows = -(-R // blocks)
  opts = sum_opts(blocks, rows, O, terms(t), t.device)
  padded = t.reshape(R, O).pad(((0, blocks * rows - R), None))
  # opts reach a kernel as its CONTIGUOUS's arg only inside a tinygrad.function: outside one, tinygrad 0.14
  # drops them when it turns the CONTIGUOUS into a store
  return function(lambda padded: padded.contiguous(arg=opts))(padded)[:R].reshape(*lead, O)

WRITTEN = {Ops.CONTIGUOUS, Ops.BUFFER, Ops.AFTER, Ops.FUNCTION, Ops.CALL}  # the lazy graph's written Tensors

def terms(t: Tensor) -> int:
  """How many terms the one sum inside t adds (C, its product's inputs), looking back to what is written; sums
  that read no memory (an arange's) are no product's."""
  def inside(u: UOp) -> list[UOp]:  # what u is computed from, back to (not including) what is written
    return list(u.toposort(gate=lambda u: u.op not in WRITTEN))
  sums = [u for u in inside(t.uop) if u.op is Ops.REDUCE and any(s.op in WRITTEN for v in inside(u) for s in v.src)]
  if len(sums) != 1:
    raise ValueError(f"fused makes one kernel of one sum, and this Tensor holds {len(sums)}")
  return math.prod(sums[0].src[0].shape) // math.prod(sums[0].shape)

def sum_opts(blocks: int, rows: int, O: int, C: int, device: str) -> tuple[Opt, ...]:
  """The opts of a kernel computing blocks × rows rows of O outputs, each a sum of C products: G threads of a
  workgroup share each sum (GROUP: their partial sums meet in local memory), each reading u neighbouring inputs
  at once (UNROLL), so that neighbouring threads read neighbouring addresses; each thread computes U outputs
  (UPCAST) for all the rows of a block (UPCAST), so that each block reads the weight once. G, u and U as in
  layout_of. The kernel's axes: its blocks × rows rows where more than one, its outputs, then the sum; the
  rows' UPCAST splits the first into blocks (a global axis: a workgroup each) and rows (in every thread)."""
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
    # device: a 5-row step's matmuls up to 1.5 times slower), compiled calls have it written out once instead
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
