"""GPT-2 in tinygrad, with a preallocated KV cache: the model and nothing else, as nanoGPT's model.py is.

    logits = model.forward(ids, start_pos)  # ids: T token ids (an int32 Tensor) at positions start_pos..
                                            # logits: float32 (T, vocab rounded up to 64), the next-token
                                            # logits at each (-inf for the tokens past the vocabulary)
    logits = model.logits(idx)              # training's forward: (B, T) ids at positions 0..T-1, no cache

forward writes those T positions into the cache. Rolling back is calling again with a smaller start_pos:
positions at or past it are overwritten before they are read. compiled.py runs forward as compiled calls
(compiled.logits(model, ids, start_pos) returns NumPy); weights.py loads and saves the weights.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from tinygrad import Context, Device, Tensor, UOp, dtypes, nn

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

# A compiled call may run more rows than it has tokens (compiled.width pads them): the KV cache keeps MAX_ROWS - 1
# spare positions past the context for the padding rows of the widest call, MAX_ROWS rows
MAX_ROWS = 64

def causal_mask(T: int, start_pos: int | UOp) -> Tensor | None:
  """The attention mask of T queries at positions start_pos..: -inf where query i (at start_pos+i) may not see
  a key, one past start_pos+i. None for one query, which sees every key in the cache."""
  return Tensor.full((1, 1, T, start_pos + T), float("-inf")).triu(start_pos + 1) if T > 1 else None

def workgroups(device: str) -> bool:
  """Whether the device runs threads in workgroups (a GPU; OpenCL): there matvec splits its sums and lays out its
  rows itself. tinygrad's CPU device runs a thread per core."""
  return Device[device].renderer.has_local

def splits(C: int, O: int, weight: Tensor) -> int:
  """Into how many partial sums a product with the weight (O, C) splits its sum over the C inputs. 1 on a device
  without workgroups (tinygrad's CPU device: a thread per core, each reading whole rows). On a GPU, the fewest S
  for which O/4 · S threads (tinygrad's kernel gives a thread 4 outputs) read the weight: at least
  min(32768, its bytes ÷ 64), as a GPU keeps its memory busy only with tens of thousands of loads in flight."""
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
  and a second adding them up."""
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

def padded_vocab(V: int) -> int:
  """The vocabulary as the device sees it: V rounded up to a multiple of 64, with tokens that never occur (logit
  -inf, probability 0). GPT-2's 50257 = 29 × 1733, so a GPU would run every sum over it as 29 threads of 1733
  steps; tinygrad splits a sum over 50304 = 192 × 262 into 192 threads of 262 steps."""
  return V + -V % 64

class Linear(nn.Linear):
  """nn.Linear, weight (out, in) and bias, run as matvec."""
  def __call__(self, x: Tensor) -> Tensor:
    return matvec(x, self.weight, self.bias)

class Attention:
  def __init__(self, cfg: GPT2Config):
    self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
    self.c_attn = Linear(cfg.n_embd, 3 * cfg.n_embd)  # q, k, v for all heads in one matmul
    self.c_proj = Linear(cfg.n_embd, cfg.n_embd)
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
  """GPT-2's layer norm, in one kernel (two when written): the statistics of x, then the normalisation done
  inside the next matmul's load. tinygrad computes an elementwise result inside its consumer, instead of writing
  it out, only when it reads at most 3 buffers: here x, its statistics and this norm's parameters. So both
  statistics come from one kernel, and GPT2.prepare packs weight and bias into the rows of one buffer."""
  def __init__(self, C: int, eps: float):
    self.weight, self.bias, self.eps = Tensor.ones(C), Tensor.zeros(C), eps
    self.written = False  # whether the normalised x is written out (GPT2.prepare sets it)

  def __call__(self, x: Tensor) -> Tensor:
    # E[x] and E[x²] in one kernel, as one sum over the pair stacked (a GPU splits it over a workgroup's
    # threads; two sums in one kernel would leave the first to one thread per row); var = E[x²] - E[x]² in
    # float32 (in float16, x² overflows past 256; rounding can take it below 0 when var is near 0)
    xf = x.float()
    mean, square = Tensor.stack(xf, xf * xf).mean(-1, keepdim=True).contiguous()
    rstd = (square - mean * mean).maximum(0).add(self.eps).rsqrt()
    normalised = ((xf - mean) * rstd * self.weight + self.bias).cast(x.dtype)
    # Inside the matmul's load it is redone for every output column: where arithmetic is scarce (tinygrad's CPU
    # device: a 5-row step's matmuls up to 1.5 times slower), compiled calls have it written out once instead
    return normalised.contiguous() if self.written else normalised

  def pack(self) -> None:
    """Make weight and bias the two rows of one buffer (a load replaces them: it unpacks them, still correct)."""
    both = Tensor.stack(self.weight, self.bias).contiguous().realize()
    self.weight, self.bias = both[0], both[1]

class MLP:
  def __init__(self, cfg: GPT2Config):
    self.c_fc, self.c_proj = Linear(cfg.n_embd, 4 * cfg.n_embd), Linear(4 * cfg.n_embd, cfg.n_embd)

  def __call__(self, x: Tensor) -> Tensor:
    return self.c_proj(self.c_fc(x).gelu())  # GPT-2's gelu is the tanh approximation, as is tinygrad's

class Block:
  def __init__(self, cfg: GPT2Config):
    self.ln_1, self.attn = LayerNorm(cfg.n_embd, cfg.norm_eps), Attention(cfg)
    self.ln_2, self.mlp = LayerNorm(cfg.n_embd, cfg.norm_eps), MLP(cfg)

  def __call__(self, x: Tensor, start_pos: int | UOp | None, mask: Tensor | None = None) -> Tensor:
    x = x + self.attn(self.ln_1(x), start_pos, mask)  # pre-norm residual blocks, as in GPT-2
    return x + self.mlp(self.ln_2(x))

class GPT2:
  def __init__(self, cfg: GPT2Config):
    self.config = cfg
    self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.n_ctx, cfg.n_embd)
    self.h = [Block(cfg) for _ in range(cfg.n_layer)]
    self.ln_f = LayerNorm(cfg.n_embd, cfg.norm_eps)
    self.calls: dict = {}  # the compiled calls that run it (compiled.py keeps them here: they go when it goes)

  def prepare(self, write_norms: bool = False) -> None:
    """Before the first forward: allocate (once) the zeroed KV caches that compiled calls point at (stale
    entries are never cleared), and pack each layer norm's parameters into one buffer; write_norms: whether the
    layer norms write their result out (see LayerNorm)."""
    norms = [self.ln_f] + [n for block in self.h for n in (block.ln_1, block.ln_2)]
    for norm in norms:
      norm.written = write_norms
    if self.h[0].attn.cache_kv is not None:
      return
    cfg, w = self.config, self.wte.weight
    shape = (2, 1, cfg.n_head, cfg.n_ctx + MAX_ROWS - 1, cfg.n_embd // cfg.n_head)
    with Context(BEAM=0):  # filling zeros is not worth a kernel search
      for block in self.h:
        block.attn.cache_kv = Tensor.zeros(*shape, dtype=w.dtype, device=w.device).contiguous().realize()
      for norm in norms:
        norm.pack()

  def forward(self, ids: Tensor, start_pos: int | UOp) -> Tensor:
    """Float32 logits (T, padded_vocab(vocab)) after each of the T token ids (an int32 Tensor) at start_pos..,
    written into the KV cache; the padding tokens' logits are -inf. No JIT: this is what a compiled call runs,
    with start_pos symbolic and the ids bound numbers or tokens drawn on the device."""
    T = ids.shape[0]
    x = self.wte.weight[ids].unsqueeze(0)  # a gather: reads T rows of the embedding, not all of it
    # a call's padding rows may sit past the context's end: give them zero position embeddings there
    x = x + self.wpe.weight.pad(((0, MAX_ROWS - 1), None))[start_pos:start_pos + T]
    mask = causal_mask(T, start_pos)  # one Tensor for all layers, one kernel (made in each, a kernel per layer)
    for block in self.h:
      x = block(x, start_pos, mask)
    # the LM head, tied to the token embedding, over the padded vocabulary (padded_vocab)
    V = self.config.vocab_size
    logits = matvec(self.ln_f(x[0]), self.wte.weight.pad(((0, padded_vocab(V) - V), None))).float()
    return (Tensor.arange(logits.shape[-1]) < V).where(logits, float("-inf"))

  def logits(self, idx: Tensor) -> Tensor:
    """Training's forward: logits (B, T, vocab) for the token ids idx (B, T) at positions 0..T-1, no cache."""
    x = self.wte(idx) + self.wpe.weight[:idx.shape[1]]
    for block in self.h:
      x = block(x, None)
    return self.ln_f(x) @ self.wte.weight.T
