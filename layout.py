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
from tinygrad import Context, Device, Tensor, dtypes, nn

# ***** the products: nn.Linear and the LM head, as matvec *****

def workgroups(device: str) -> bool:
  """Whether the device runs threads in workgroups (a GPU; OpenCL): there matvec splits its sums and lays out its
  rows itself. tinygrad's CPU device runs a thread per core."""
  return Device[device].renderer.has_local

def splits(C: int, O: int, weight: Tensor) -> int:
  """Into how many partial sums a product with the weight (O, C) splits its sum over the C inputs. 1 on a device
  without workgroups (tinygrad's CPU device: a thread per core, each reading whole rows; the split layouts tried
  there were 1.1 to 1.6 times slower at 5 rows, gpt2-xl's c_fc to its c_attn). On a GPU, the fewest S for which
  O/4 · S threads (tinygrad's kernel gives a thread 4 outputs) read the weight: at least min(32768, its bytes ÷
  64), as a GPU keeps its memory busy only with tens of thousands of loads in flight (gpt2-xl's c_attn and c_fc
  40, its c_projs 100, the LM head 4; gpt2's 64, 96, 48, 192 and 8)."""
  if not workgroups(weight.device) or C % 4 or O % 4:
    return 1
  enough = min(32768, C * O * weight.dtype.itemsize // 64)
  # S a multiple of 4, so that a workgroup holds 4 or 8 neighbouring partial sums (see matvec), and one that
  # leaves runs of 4 inputs whole where C allows (C/4 even), else of 1
  fits = [S for S in range(4, C // 4 + 1, 4) if C // 4 % S == 0] or [S for S in range(4, C + 1, 4) if C % S == 0]
  return next((S for S in fits if O // 4 * S >= enough), fits[-1] if fits else 1)

def matvec(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
  """x @ weight.T + bias, for x (..., T, C) and weight (O, C), nn.Linear's layout: each output a sum of C
  products, in float32. On a GPU that sum is split into S partial sums (splits), one kernel computing all of them
  and a second adding them up. The price: more kernels (a gpt2-xl step 538 -> 731) and the partial sums written
  and read back (at most 7.7 MB a product, gpt2-xl's c_projs at 6 rows, within an H100's 50 MB of L2), for
  weights read once by tens of thousands of threads (gpt2-xl's c_fc by 1600 before)."""
  *lead, T, C = x.shape
  O, S = weight.shape[0], splits(C, weight.shape[0], weight)
  if S == 1:
    return x.linear(weight.T, bias)
  x = x.reshape(-1, C)
  if x.shape[0] > 36:  # more rows than one thread holds: in blocks of 36, each reading the weight once
    return Tensor.cat(*[matvec(block, weight, bias) for block in x.split(36)]).reshape(*lead, T, O)
  rows = padded_rows(x.shape[0])
  # input c = U(S·l + s) + u: partial sum s takes U neighbouring inputs of each run of U·S, so that neighbouring
  # threads (s, s+1) read neighbouring addresses of every weight row, U at a time where the kernel's thread has
  # registers for them (a thread holds the 4 outputs it computes for every row)
  U = 4 if math.prod(rows) <= 15 and C % (4 * S) == 0 else 1
  xs = rows_padded(x, rows).reshape(*rows, 1, -1, S, U)
  partial = (xs * weight.reshape(O, -1, S, U)).sum((-3, -1), dtype=dtypes.float32)  # (*rows, O, S)
  y = partial.permute(*range(len(rows)), -1, -2).contiguous().sum(-2)
  y = y.reshape(-1, O)[:T] if len(rows) == 1 else y[:-1, :-1].reshape(-1, O)[:T]
  return (y if bias is None else y + bias).cast(weight.dtype).reshape(*lead, T, O)

def padded_rows(R: int) -> tuple[int, ...]:
  """How matvec lays out R rows: padded with rows that the load masks, as one axis of up to 7 or two whose
  product is at most 49, as tinygrad gives one thread every row of such axes (its kernels unroll masked
  axes that small), so that each weight is read once for all rows; unmasked, each row would read it again."""
  if R == 1:
    return (R,)
  if R <= 6:
    return (R + 1,)
  return min(((a + 1, -(-R // a) + 1) for a in range(2, 7) if -(-R // a) <= 6), key=math.prod)

def rows_padded(x: Tensor, rows: tuple[int, ...]) -> Tensor:
  """x (R, C) as padded_rows lays it out: its rows, then zeros that the load masks, in rows (one axis or two)."""
  if len(rows) == 1:
    return x.pad(((0, rows[0] - x.shape[0]), None))
  a, b = rows[0] - 1, rows[1] - 1
  return x.pad(((0, a * b - x.shape[0]), None)).reshape(a, b, -1).pad(((0, 1), (0, 1), None))

class Linear(nn.Linear):
  """nn.Linear, weight (out, in) and bias, run as matvec."""
  def __call__(self, x: Tensor) -> Tensor:
    return matvec(x, self.weight, self.bias)

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
  logits = matvec(x, wte.pad(((0, padded_vocab(V) - V), None))).float()
  return (Tensor.arange(logits.shape[-1]) < V).where(logits, float("-inf"))

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
  """softmax(scores) @ v, in v's dtype, dividing by the softmax's sum after the product, in its epilogue (T ×
  head_dim divisions): exp(scores - max) then reads only two buffers, which tinygrad computes inside the
  product's load instead of writing it out (3 kernels: max, sum, product; softmax first took 4). The result is
  written out: left to c_proj, its division would be redone in c_proj's load for every output column."""
  e = (scores - scores.max(-1, keepdim=True)).exp()
  return ((e @ v.float()) / e.sum(-1, keepdim=True)).cast(v.dtype).contiguous()
