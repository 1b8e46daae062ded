"""Timing a round's parts alone, after a run: what the cost model (costs.py) prices a round with. A round is one
compiled call, which cannot time its parts, so each part is compiled as the round runs it and replayed alone, in
turn with the round itself and with Algorithm 1's call t(1), the cost model's unit.

    time_parts(target, draft, K, sampling, stats, x)   # fills in stats: c, its first step, the target's K+1 rows, v
"""
from __future__ import annotations
from tinygrad import Tensor, UOp
from costs import Stats
from gpt2 import GPT2
from sampling import Sampling
from speculative import Draft, token_step
from engine.compiled import padded_rows, step, time_calls
from engine.layout import padded_vocab
from tools.session import heartbeat

REPS = 7  # replays of each call, whose median each time is

# a model's step replaced by rows fixed in advance (fixed_rows), by device, vocabulary, rows and whether searched
FIXED: dict[tuple[str, int, int, bool], Tensor] = {}

def fixed_rows(model: GPT2, ids: Tensor, start_pos: UOp, searched: bool) -> Tensor:
  """A model's step replaced by rows fixed in advance, uniform over the vocabulary, as wide as the step's
  (padded_rows): in a round's compiled call, this leaves the round's own work alone, the cost model's v (the draws
  of x̃, the tests, the last draw, the NaN flag). verify's `where`s make any finite p and q cost alike."""
  return FIXED[(model.wte.weight.device, model.config.vocab_size, ids.shape[0], searched)]

def fix_rows(target: GPT2, K: int) -> None:
  """Make the rows fixed_rows gives for a round of K drafts, realized before the round's call captures them (made
  inside it, they would be kernels of the call)."""
  V, device = target.config.vocab_size, target.wte.weight.device
  for rows in (1, 2, K + 1):
    for searched in (False, True):
      if (device, V, rows, searched) not in FIXED:
        uniform = Tensor.full((padded_rows(rows, searched, device), V), 1.0 / V, device=device)
        FIXED[(device, V, rows, searched)] = uniform.pad((None, (0, padded_vocab(V) - V))).contiguous().realize()

def time_parts(target: GPT2, draft: Draft, K: int, sampling: Sampling, stats: Stats, x: list[int],
               reps: int = REPS, baseline: bool = True) -> None:
  """Fill in stats with a round's parts, each a compiled call timed alone: the target's step of K+1 rows, the
  draft's steps (draft.steps) and the round's own work (the round's call with fixed_rows for its models' steps);
  the round itself, to compare with its parts; and, with baseline, Algorithm 1's call t(1): all replayed after the
  run in turn (compiled.time_calls), the round, its own work and Algorithm 1's call with their numbers read, as a
  run reads them. Calls timed apart from each other would let a slow spell of the machine fall on one side only.
  The round replayed is the one after the middle of the run's text x (its last stats.new_tokens // 2 cut), with
  its last token repeated, so that prompt lookup finds a match and drafts: a round, not a plain target step.
  Without baseline, Algorithm 1's call is not compiled (its compile costs seconds to minutes), and t(1) stays
  nan."""
  n_ctx = min(m.config.n_ctx for m in [target, *draft.models])
  x = x[:max(min(len(x) - stats.new_tokens // 2, n_ctx - 2), 1)]
  x, n = x + x[-1:], len(x) + 1
  fix_rows(target, K)
  call, values, _ = draft.round(target, x, K, K, sampling)
  work, _, _ = draft.round(target, x, K, K, sampling, forward=fixed_rows)
  steps = draft.steps(x, sampling)
  calls = [(call, [*values, 0, 0, n - 1], True), (step(target, K + 1, sampling), [n - 1, x[-1], *[0] * K], False),
           *[(c, v, False) for c, v in steps.values()], (work, [*values, 0, 0, n - 1], True)]
  if baseline:
    calls.append((token_step(target, sampling), [x[-1], 0, 0, n - 1], True))
  with heartbeat(lambda: "timing a round, its parts and Algorithm 1's call, in turn"):
    times = time_calls(calls, reps)
  if baseline:
    stats.token_call_time = times.pop()
  stats.round_replay_time, stats.target_call_time, *step_times, stats.work_time = times
  stats.draft_first_time, stats.draft_call_time, stats.draft_round_time = draft_times(dict(zip(steps, step_times)),
                                                                                       stats, K)

def draft_times(steps: dict[str, float], stats: Stats, K: int) -> tuple[float, float, float]:
  """Seconds of a round's first draft step, of each later one (c's numerator), and of the draft's share of a
  round's call. A draft with no steps finds its drafts on the host (prompt lookup): no first step, each draft
  its share of the run's host time outside the calls, and none of the round's call."""
  if not steps:
    return float("nan"), stats.propose_time / max(stats.drafted, 1), 0.0
  return steps["first"], steps["later"], steps["first"] + (K - 1) * steps["later"]
