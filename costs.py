"""What a run of speculative.py measured, and what Leviathan et al.'s cost model makes of it.

    stats = speculative_sample(target, draft, prompt, 64)[2]   # Stats: counts, times, α̂
    tools.parts.time_parts(target, draft, K, sampling, stats, x)   # fills in a round's parts, timed alone
    predicted_speedup(stats.acceptance_rate, stats.costs)      # E / a round's cost, in tokens of Algorithm 1

The cost model is Leviathan, Kalman and Matias (2022), "Fast Inference from Transformers via Speculative
Decoding": a round emits E = (1 - α^(K+1)) / (1 - α) tokens on average (their Eq. 1) and, with drafts that cost c
of a target call each, is E / (K·c + 1) times faster than plain decoding (their Theorem 3.8). Chen et al. (2023)
give Algorithm 2 and measured speedups, but no such formula. Here a round is priced from its parts, each a
compiled call timed alone on the device, in units of t(1), the time of Algorithm 1's call (a token): the
prediction uses no timing of the round itself, which stays a check (Stats.round_over_parts).
"""
from __future__ import annotations
import math
from dataclasses import dataclass

# the Stats fields timed apart after a run (tools/parts.py), which runs pooled together average, not add
TIMED_APART = ("draft_first_time", "draft_call_time", "draft_round_time", "target_call_time", "work_time",
               "round_replay_time", "token_call_time")

@dataclass
class Stats:
  """What a run measured. A round is one compiled call, so its parts cannot be timed inside it: draft_first_time,
  draft_call_time and target_call_time are its steps, compiled as the round runs them, and work_time its own work
  (tools/parts.py), each timed alone after the run, in turn with a replay of the round
  (round_replay_time, to compare) and, to price them in tokens of Algorithm 1, its call (token_call_time), filled
  in by tools.parts.time_parts. Algorithm 1's own run fills in target_call_time with its call's mean time in the run."""
  new_tokens: int = 0
  rounds: int = 0            # rounds after the prompt, each one pass of the target (Algorithm 1: one a token)
  drafted: int = 0           # draft tokens proposed
  accepted: int = 0          # drafts that passed r < q(x̃)/p(x̃)
  rejected: int = 0          # drafts that failed it: each ends its round, so the drafts after it
                             # are never checked
  plain_rounds: int = 0      # rounds whose draft proposed nothing: a plain target step (prompt lookup's misses)
  compiled_calls: int = 0    # compiled calls launched after the prompt
  round_time: float = 0.0    # seconds in them, from each launch until its numbers were read on the host
  host_time: float = 0.0     # seconds until each launch returned: on CUDA or Metal, the host's own work
  propose_time: float = 0.0  # seconds the host spent choosing each round's call and drafts (prompt lookup's)
  draft_first_time: float = float("nan")  # seconds of a round's first draft step, of 2 rows, timed apart
  draft_call_time: float = float("nan")   # seconds to draft one token: one draft step of 1 row timed apart,
                                          # or a share of prompt lookup's host work
  draft_round_time: float = float("nan")  # seconds of the draft's steps in a round: the first and K-1 later
                                          # ones; 0 for prompt lookup, whose drafts come from the host
  target_call_time: float = float("nan")  # seconds of one target step of K+1 rows timed apart; for
                                          # Algorithm 1, its whole call (pass and draw)
  work_time: float = float("nan")  # seconds of the round's own work timed apart (the draws of x̃, the tests,
                                   # the last draw, the NaN flag), its numbers read on the host as a run does
  round_replay_time: float = float("nan")  # seconds of one round replayed after the run, in turn with its parts,
                                           # its numbers read: compared, never a term of the prediction
  token_call_time: float = float("nan")    # t(1): seconds of Algorithm 1's call (a token, read), timed in turn
                                           # with them; nan where the run did not time it
  total_time: float = 0.0    # seconds of the whole run, the prompt's prefill included
  decode_time: float = 0.0   # seconds after the prefill: what tokens_per_second and the speedup compare
  stopped_by: str = ""       # "max-new-tokens", "end-of-text" or "the context": what ended the run

  @property
  def acceptance_rate(self) -> float:
    """α̂ = accepted / checked drafts, the estimate of the paper's α (the chance that one draft is accepted).

    Every check that verify made counts, also in a last round whose tokens max-new-tokens or end-of-text then
    cut: each check is a fair draw of "is x̃ accepted?", and dropping those of the cut tokens, which are
    mostly accepted ones, would bias α̂ low. Drafts after a rejection are never checked, so they never count.
    """
    return self.accepted / max(self.accepted + self.rejected, 1)

  @property
  def tokens_per_target_call(self) -> float:
    return self.new_tokens / max(self.rounds, 1)

  @property
  def mean_drafted(self) -> float:
    """Drafts proposed per round that drafts (the cost model's K): K for a model draft (fewer only at the
    context's end), up to K for prompt lookup, whose rounds that find nothing are plain target steps."""
    return self.drafted / max(self.rounds - self.plain_rounds, 1)

  @property
  def plain_share(self) -> float:
    """The share of rounds that were a plain target step, the draft proposing nothing: 0 for a model draft."""
    return self.plain_rounds / max(self.rounds, 1)

  @property
  def round_call_time(self) -> float:
    """Seconds per compiled call: a whole round of Algorithm 2 (a token of Algorithm 1), read included."""
    return self.round_time / max(self.compiled_calls, 1)

  @property
  def round_parts_time(self) -> float:
    """Seconds of a round's compiled call priced by its parts, each timed apart: the draft's steps
    (draft_round_time), the target's K+1 rows and the round's own work."""
    return self.draft_round_time + self.target_call_time + self.work_time

  @property
  def round_over_parts(self) -> float:
    """The check that a compiled round costs its parts: a round replayed ÷ its parts and own work, timed in turn.
    Below 1 by the launches that the parts pay apart and a round once; well off 1, and the round runs other
    kernels than its parts."""
    return self.round_replay_time / self.round_parts_time

  @property
  def host_draft_time(self) -> float:
    """Seconds a round that drafts spends on the host, outside its call, finding its drafts: prompt lookup's
    lookups (those of the rounds that found nothing too); 0 for a model draft."""
    return self.mean_drafted * self.draft_call_time if math.isnan(self.draft_first_time) else 0.0

  @property
  def round_alone_time(self) -> float:
    """Seconds of an average round of the run, each replayed alone: a round that drafts, its lookups on the host
    added (prompt lookup), and a plain round (prompt lookup's misses) at t(1), in the share the run had them."""
    plain = self.plain_share
    return (1 - plain) * (self.round_replay_time + self.host_draft_time) + plain * self.token_call_time

  @property
  def costs(self) -> Costs:
    """The round's costs in units of t(1) (nan where t(1) was not timed): c, its first step, s and v, and the
    share of plain rounds."""
    t1, K = self.token_call_time, self.mean_drafted
    # prompt lookup has no first step of 2 rows: its drafts, found on the host outside the round's call, cost
    # alike (a share of its lookups), so its round is K·c + s + v
    first = self.draft_call_time if math.isnan(self.draft_first_time) else self.draft_first_time
    return Costs(K, self.draft_call_time / t1, first / t1, self.target_call_time / t1, self.work_time / t1,
                 self.plain_share)

  @property
  def ms_per_token(self) -> float:
    """Milliseconds a token after the prompt's prefill: the paper's Table 1 measure, as the speedup compares."""
    return 1e3 * self.decode_time / max(self.new_tokens, 1)

  @property
  def tokens_per_second(self) -> float:
    """Tokens a second after the prompt's prefill."""
    return self.new_tokens / self.decode_time

def expected_tokens_per_round(alpha: float, K: float) -> float:
  """E = (1 - α^(K+1)) / (1 - α), the expected tokens a round emits when each draft is accepted with
  probability α independently (Leviathan et al. 2022, Eq. 1). For a draft that proposes a varying number, K is
  the mean proposed: an approximation, as the formula is not linear in K."""
  return K + 1.0 if alpha >= 1 else (1 - alpha ** (K + 1)) / (1 - alpha)

@dataclass(frozen=True)
class Costs:
  """A round's costs in units of t(1), the time of Algorithm 1's call (a token: the target's step of 1 row, its
  draw and its read). Leviathan et al. (2022) price a round at K·c + 1: K draft steps and one target call that
  costs as much as one token. A round here pays its first draft step apart (first: 2 rows, x_{n-1} and x_n, as the
  draft has never fed x_n, nor x_{n-1} = x̃_K after a round that accepted every draft), s for the target's K+1
  rows, and v for its own work: the draft's K draws of x̃ (so c, like s, is a model's step alone), the K tests,
  the residual or bonus draw, the NaN flag and the read of its numbers. Prompt lookup finds its drafts on the
  host (c a share of its lookups, first = c), and where it finds none the round is a plain target step: one
  token for t(1), a share `plain` of its rounds.

  Each part is a compiled call timed alone, its launch and binding included, which a round pays once: a round
  priced first + (K-1)·c + s + v counts K+2 launches for its one. The prediction keeps them (their host work on
  DEV=NULL: docs/engine.md; Stats.round_over_parts shows what they amount to on the device)."""
  K: float      # drafts a round (for prompt lookup, the mean proposed in a round that drafts)
  c: float      # a draft step of 1 row ÷ t(1): Leviathan et al.'s c (prompt lookup: its lookups per draft)
  first: float  # the round's first draft step (x_{n-1} and x_n, 2 rows) ÷ t(1); c for prompt lookup
  s: float      # the target's scoring step of K+1 rows ÷ t(1) (Algorithm 2's "in parallel, compute K + 1 sets of
                # logits", speculative.score): 1 in Leviathan et al.'s model; not the paper's uniform r
  v: float      # the round's own work, compiled and timed alone ÷ t(1): 0 in their model
  plain: float = 0.0  # the share of rounds that are a plain target step (prompt lookup's misses): 0 for a model

  @property
  def round(self) -> float:
    """A round's cost ÷ t(1): its draft steps, the target's K+1 rows, its own work (a plain round: 1)."""
    return (1 - self.plain) * (self.first + (self.K - 1) * self.c + self.s + self.v) + self.plain

  def tokens(self, alpha: float) -> float:
    """The tokens a round emits on average: E(α, K) (a plain round: 1)."""
    return (1 - self.plain) * expected_tokens_per_round(alpha, self.K) + self.plain

def ideal_speedup(alpha: float, K: float, c: float) -> float:
  """Leviathan et al.'s expected speedup E / (K·c + 1) (2022, Theorem 3.8): the target's K+1 rows priced as
  one token and the round doing nothing else."""
  return expected_tokens_per_round(alpha, K) / (K * c + 1)

def predicted_speedup(alpha: float, costs: Costs) -> float:
  """The expected speedup over Algorithm 1 from the measured costs: E tokens a round ÷ a round's cost in
  tokens of Algorithm 1, E / (c₁ + (K-1)·c + s + v) (with prompt lookup's plain rounds mixed in, each 1 ÷ 1)."""
  return costs.tokens(alpha) / costs.round

def break_even_alpha(costs: Costs) -> float | None:
  """The α at which a round pays for itself (its tokens, E(α, K), = its cost in t(1)): 0 where a round costs at
  most one token's call, None where even K+1 tokens a round would not cover it."""
  if costs.round <= 1:
    return 0.0
  if costs.round >= costs.tokens(1.0):
    return None
  low, high = 0.0, 1.0  # E rises with α, from 1 at α = 0 to K+1 at α = 1
  for _ in range(60):
    mid = (low + high) / 2
    low, high = (mid, high) if costs.tokens(mid) < costs.round else (low, mid)
  return (low + high) / 2

def measured_over_predicted(spec: Stats, base: Stats) -> dict[str, float]:
  """Where the measured speedup (Algorithm 1's ms a token ÷ Algorithm 2's) departs from predicted_speedup: four
  ratios whose product is measured ÷ predicted, each 1 where its side of the prediction held.
  tokens: the tokens a round emitted ÷ E at α̂ (rounds cut by max-new-tokens, α not i.i.d., K varying);
  parts: a round priced by its parts ÷ the round replayed alone (prompt lookup's lookups added to both, and its
  plain rounds priced at t(1) in both);
  replay: the round replayed ÷ a round of the run (its host loop included);
  baseline: Algorithm 1's run, a token ÷ t(1), its call timed alone."""
  m, t1, alone = spec.costs, spec.token_call_time, spec.round_alone_time
  return {"tokens": spec.tokens_per_target_call / m.tokens(spec.acceptance_rate),
          "parts": m.round * t1 / alone, "replay": alone / (spec.decode_time / spec.rounds),
          "baseline": (base.decode_time / base.new_tokens) / t1}
