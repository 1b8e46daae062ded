"""GPT-2 in tinygrad, with a preallocated KV cache.

One call does everything the rest of the project needs:

    logits = model(tokens, start_pos)   # tokens: int Tensor (1, T) at positions start_pos .. start_pos+T-1
                                         # logits: float32 Tensor (1, T, vocab), next-token logits at each position

It writes those T positions into the cache. Rolling back is calling again with a smaller start_pos:
positions at or past it are overwritten before they are read. Weights come from weights.py.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Callable
from tinygrad import Tensor, TinyJit, Variable, dtypes, nn

@dataclass(frozen=True)
class GPT2Config:
  n_layer: int = 12
  n_head: int = 12
  n_embd: int = 768
  vocab_size: int = 50257
  n_ctx: int = 1024
  norm_eps: float = 1e-5

# The four sizes OpenAI released, as named on the Hugging Face Hub.
PRESETS = {
  "gpt2":        GPT2Config(n_layer=12, n_head=12, n_embd=768),    # 124M
  "gpt2-medium": GPT2Config(n_layer=24, n_head=16, n_embd=1024),   # 355M
  "gpt2-large":  GPT2Config(n_layer=36, n_head=20, n_embd=1280),   # 774M
  "gpt2-xl":     GPT2Config(n_layer=48, n_head=25, n_embd=1600),   # 1.5B
}

JIT_MAX_T = 16  # calls of up to this many tokens (decode steps, draft scoring) replay a compiled TinyJit
# A block of 2 or more tokens runs as a multiple of ROWS rows (see GPT2.forward). tinygrad's default kernels read a
# weight once for several rows only when 3 or 4 divides the row count, and otherwise once per row: on a 2-core CPU,
# scoring 5 tokens (K=4) read all weights, the 154 MB LM head included, 5 times and cost 3.3x one token for GPT-2
# 124M. As 8 rows it costs 1.7x (two passes of 4 rows), and 2 to 4 tokens cost about one.
ROWS = 4

def jit_by_length(fn: Callable[[Tensor, Variable], Tensor], n_ctx: int) -> Callable[[Tensor, int], Tensor]:
  """Wrap fn(tokens, start_pos) so that each short length T replays its own TinyJit with a symbolic start_pos.

  The start position is a bound Variable, so a steady-state step compiles nothing new. Longer inputs
  (a prompt's prefill) run eagerly. A jitted result lives in a buffer the next call overwrites: read it first.
  """
  jits: dict[int, TinyJit] = {}
  def call(tokens: Tensor, start_pos: int) -> Tensor:
    T = tokens.shape[1]
    if T > JIT_MAX_T: return fn(tokens, start_pos).realize()
    jit = jits.setdefault(T, TinyJit(fn))
    return jit(tokens.contiguous().realize(), Variable("start_pos", 0, n_ctx - T).bind(start_pos))
  return call

class Attention:
  def __init__(self, cfg: GPT2Config):
    self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
    self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)  # q, k, v for all heads in one matmul
    self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
    self.cache_kv: Tensor | None = None                  # (2, 1, n_head, n_ctx + ROWS - 1, head_dim), made on first use

  def __call__(self, x: Tensor, start_pos: int | Variable) -> Tensor:
    B, T, C = x.shape
    q, k, v = [t.reshape(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2)]
    # write this step's keys and values at start_pos .. start_pos+T-1; anything after them is stale and never read
    self.cache_kv[:, :, :, start_pos:start_pos + T].assign(Tensor.stack(k, v))
    k, v = self.cache_kv[0, :, :, :start_pos + T], self.cache_kv[1, :, :, :start_pos + T]
    # causal mask: query i (at position start_pos+i) sees keys 0 .. start_pos+i
    mask = Tensor.full((1, 1, T, start_pos + T), float("-inf"), dtype=x.dtype).triu(start_pos + 1) if T > 1 else None
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

  def __call__(self, x: Tensor, start_pos: int | Variable) -> Tensor:
    x = x + self.attn(self.ln_1(x), start_pos)  # pre-norm residual blocks, as in GPT-2
    return x + self.mlp(self.ln_2(x))

class GPT2:
  def __init__(self, cfg: GPT2Config):
    assert cfg.n_embd % cfg.n_head == 0, f"n_embd {cfg.n_embd} is not a multiple of n_head {cfg.n_head}"
    self.config = cfg
    self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.n_ctx, cfg.n_embd)
    self.h = [Block(cfg) for _ in range(cfg.n_layer)]
    self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
    self.step = jit_by_length(self.forward, cfg.n_ctx)

  def make_cache(self) -> None:
    """Allocate zeroed KV caches in the weights' dtype and device, once: compiled calls keep pointing at these buffers.

    The first forward pass does it; there is never a need to clear them, as stale entries are overwritten before they are read.
    """
    if self.h[0].attn.cache_kv is not None: return
    cfg, w, size = self.config, self.wte.weight, self.config.n_ctx + ROWS - 1  # room for the padding rows of a block at the end
    for block in self.h:
      block.attn.cache_kv = Tensor.zeros(2, 1, cfg.n_head, size, cfg.n_embd // cfg.n_head, dtype=w.dtype, device=w.device).contiguous().realize()

  def forward(self, tokens: Tensor, start_pos: int | Variable) -> Tensor:
    """Next-token logits (1, T, vocab) in float32 for tokens (1, T) at start_pos; no JIT, start_pos may be symbolic."""
    T = tokens.shape[1]
    self.make_cache()
    x = self.wte(tokens) + self.wpe.weight[start_pos:start_pos + T]
    # Pad a block to a multiple of ROWS rows with zero rows after the real ones, and drop their logits. The causal mask
    # hides them from the real rows; their keys and values go to the cache past the real positions, where entries are
    # stale anyway: overwritten before they are read. A decode step (1 token) stays 1 row: the matrix-vector case.
    x = x.pad((None, (0, -T % ROWS if T > 1 else 0), None))
    for block in self.h: x = block(x, start_pos)
    logits = (self.ln_f(x) @ self.wte.weight.T).contiguous()  # the LM head is tied to the token embedding
    return logits[:, :T].cast(dtypes.float32)  # after contiguous: a lazy shrink would shrink the LM head's rows back to T

  def __call__(self, tokens: Tensor, start_pos: int) -> Tensor:
    """Next-token logits for tokens (1, T) at positions start_pos .. start_pos+T-1, writing them into the KV cache."""
    T = tokens.shape[1]
    if not (0 <= start_pos and start_pos + T <= self.config.n_ctx):
      raise ValueError(f"positions {start_pos}..{start_pos + T - 1} fall outside the context of {self.config.n_ctx}")
    return self.step(tokens, start_pos)
