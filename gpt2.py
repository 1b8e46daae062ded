"""GPT-2 in tinygrad, with a preallocated KV cache and compiled steps.

One call does everything the rest of the project needs:

    logits = model(ids, start_pos)  # ids: T token ids at positions start_pos .. start_pos+T-1
                                    # logits: float32 (1, T, vocab), the next-token logits at each
    probs = model(ids, start_pos, last=3, head=f)  # f(the last 3 positions' logits), in one compiled call

It writes those T positions into the cache. Rolling back is calling again with a smaller start_pos:
positions at or past it are overwritten before they are read. Weights come from weights.py.
"""
from __future__ import annotations
import os
from dataclasses import dataclass
from typing import Callable
from tinygrad import Context, Device, Tensor, TinyJit, UOp, Variable, dtypes, nn

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

BLOCK = 8  # a longer input (a prompt) goes in blocks of at most 8 tokens, the sizes a round scores anyway

# Kernel search. tinygrad's default kernels leave most of the speed of GPT-2's few matrix shapes on the table;
# BEAM search times candidate layouts of each kernel of a compiled step and keeps the fastest (on a 2-core CPU,
# gpt2: 1 token 112 -> 43 ms, 5 tokens 218 -> 63 ms). tinygrad caches the result on disk (~/.cache/tinygrad),
# so each call shape is searched once per machine: minutes, the first time. BEAM=0 skips the search.
SEARCH = int(os.environ.get("BEAM", 2))
# Without the search, a block of 2 or more tokens runs as a multiple of ROWS rows (see GPT2.forward): tinygrad's
# default kernels read a weight once for all the rows of a block only when 3 or 4 divides the row count.
ROWS = 4

def pad_rows(x: Tensor, rows: int) -> Tensor:
  """x (1, T, C) with zero rows appended up to a multiple of rows; one row (matrix-vector) stays one."""
  T = x.shape[1]
  return x.pad((None, (0, -T % rows if T > 1 else 0), None))

class Attention:
  def __init__(self, cfg: GPT2Config):
    self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
    self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)  # q, k, v for all heads in one matmul
    self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
    self.cache_kv: Tensor | None = None  # (2, 1, n_head, n_ctx + ROWS - 1, head_dim), made on first use

  def __call__(self, x: Tensor, start_pos: int | UOp) -> Tensor:
    B, T, C = x.shape
    qkv = self.c_attn(x).split(C, dim=2)
    q, k, v = [t.reshape(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in qkv]
    # write this step's keys and values at start_pos .. start_pos+T-1; anything past them is stale, never read
    self.cache_kv[:, :, :, start_pos:start_pos + T].assign(Tensor.stack(k, v))
    k, v = self.cache_kv[0, :, :, :start_pos + T], self.cache_kv[1, :, :, :start_pos + T]
    # causal mask: query i (at position start_pos+i) sees keys 0 .. start_pos+i
    mask = None
    if T > 1:
      mask = Tensor.full((1, 1, T, start_pos + T), float("-inf"), dtype=x.dtype).triu(start_pos + 1)
    y = q.scaled_dot_product_attention(k, v, attn_mask=mask).cast(x.dtype)
    return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

class MLP:
  def __init__(self, cfg: GPT2Config):
    self.c_fc, self.c_proj = nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.Linear(4 * cfg.n_embd, cfg.n_embd)

  def __call__(self, x: Tensor) -> Tensor:
    return self.c_proj(self.c_fc(x).gelu())  # GPT-2's gelu is the tanh approximation, as is tinygrad's

class Block:
  def __init__(self, cfg: GPT2Config):
    self.ln_1, self.attn = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps), Attention(cfg)
    self.ln_2, self.mlp = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps), MLP(cfg)

  def __call__(self, x: Tensor, start_pos: int | UOp) -> Tensor:
    x = x + self.attn(self.ln_1(x), start_pos)  # pre-norm residual blocks, as in GPT-2
    return x + self.mlp(self.ln_2(x))

class GPT2:
  def __init__(self, cfg: GPT2Config):
    self.config = cfg
    self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.n_ctx, cfg.n_embd)
    self.h = [Block(cfg) for _ in range(cfg.n_layer)]
    self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
    self.steps: dict[tuple, tuple[TinyJit, list[UOp]]] = {}  # compiled calls and their Variables (see step)
    # DEV=NULL runs no kernel, so there is nothing to time there
    self.search = 0 if Device.DEFAULT == "NULL" else SEARCH

  def make_cache(self) -> None:
    """Allocate zeroed KV caches in the weights' dtype and device, once: compiled steps point at them.

    There is never a need to clear them, as stale entries are overwritten before they are read.
    """
    if self.h[0].attn.cache_kv is not None:
      return
    cfg, w = self.config, self.wte.weight
    # n_ctx + ROWS - 1 positions: room for the padding rows of a block at the end of the context
    shape = (2, 1, cfg.n_head, cfg.n_ctx + ROWS - 1, cfg.n_embd // cfg.n_head)
    for block in self.h:
      block.attn.cache_kv = Tensor.zeros(*shape, dtype=w.dtype, device=w.device).contiguous().realize()

  def forward(self, ids: list[int | UOp], start_pos: int | UOp, last: int) -> Tensor:
    """Float32 logits (1, last, vocab) after the last `last` of the tokens ids at start_pos.

    No JIT: this is what a compiled step runs, with start_pos and the ids symbolic."""
    T = len(ids)
    # each id picks its embedding row with a slice, so a symbolic id is just a number bound at each call
    x = Tensor.cat(*[self.wte.weight.shrink(((i, i + 1), None)) for i in ids]).unsqueeze(0)
    rows = 1 if self.search else ROWS  # searched kernels need no padding
    x = pad_rows(x + self.wpe.weight[start_pos:start_pos + T], rows)
    # Padding: a block runs as a multiple of rows, zero rows after the real ones, whose logits are
    # dropped. The mask hides them from the real rows; their keys and values go to the cache past the real
    # positions, where entries are stale anyway: overwritten before they are read.
    for block in self.h:
      x = block(x, start_pos)
    # The LM head (tied to the token embedding) for the last `last` rows, padded too, and over 50304 tokens, not
    # 50257 (a prime, which no thread count divides). contiguous() before dropping the padding, or a lazy
    # slice would shrink the matmul itself back.
    V = self.config.vocab_size
    w = self.wte.weight.pad(((0, -V % 64), None))
    logits = (pad_rows(self.ln_f(x[:, T - last:T]), rows) @ w.T).contiguous()[:, :last, :V]
    return logits.cast(dtypes.float32)

  def step(self, ids: list[int], start_pos: int, last: int,
           head: Callable[[Tensor], Tensor] | None) -> Tensor:
    """One compiled call. start_pos and the ids enter it as Variables bound to their values, so every call
    after the first two (run, then capture) replays the same kernels and schedules nothing: its host work is
    binding T + 1 numbers and one launch. head, if given, maps the (last, vocab) logits to the result."""
    cfg, T = self.config, len(ids)
    if (T, last, head) not in self.steps:
      def run(start_pos: UOp, *ids: UOp) -> Tensor:
        logits = self.forward(list(ids), start_pos, last)
        # every result is read on the host: the copy there is part of the compiled step
        return (logits if head is None else head(logits[0])).to("CPU").contiguous()
      ids_vars = [Variable(f"id{t}", 0, cfg.vocab_size - 1) for t in range(T)]
      variables = [Variable("start_pos", 0, cfg.n_ctx - T)] + ids_vars
      self.steps[(T, last, head)] = TinyJit(run), variables
    jit, variables = self.steps[(T, last, head)]
    with Context(BEAM=self.search if jit.cnt < 2 else 0):  # the two calls that compile search (see SEARCH)
      return jit(*(v.bind(int(n)) for v, n in zip(variables, [start_pos, *ids])))

  def __call__(self, ids: list[int], start_pos: int, last: int | None = None,
               head: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """Next-token logits (1, last, vocab) after the last `last` (default: all) of ids, fed at positions
    start_pos.., writing them into the KV cache; with head, head(logits[0]) instead. The result is in host
    memory (tinygrad's CPU device), in a buffer that the next call of the same shape overwrites: read it
    first."""
    cfg, T = self.config, len(ids)
    last = T if last is None else last
    if not (0 <= start_pos and start_pos + T <= cfg.n_ctx):
      raise ValueError(f"positions {start_pos}..{start_pos + T - 1} fall outside the context of {cfg.n_ctx}")
    if not all(0 <= i < cfg.vocab_size for i in ids):
      raise ValueError(f"token ids must be in 0..{cfg.vocab_size - 1}")
    if not 1 <= last <= T:
      raise ValueError(f"last is {last}: it must be in 1..{T}, the number of tokens")
    self.make_cache()
    # a long input goes in blocks of up to BLOCK tokens first, keeping at least `last` for the final call
    while T > max(BLOCK, last):
      n = min(BLOCK, T - last)
      self.step(ids[:n], start_pos, 1, head)
      ids, start_pos, T = ids[n:], start_pos + n, T - n
    return self.step(ids, start_pos, last, head)
