"""speculative.py: greedy equals Algorithm 1, a perfect draft is always accepted, the stopping rules hold, and
the CLI works as a user runs it, with one clear sentence for bad input."""
import ast, dataclasses, math, os, pathlib, re, signal, sqlite3, subprocess, sys, threading, time, types
import numpy as np, pytest
from tinygrad import Tensor
from tiny import REPO, TOKENIZER_DIR, run_script, write_checkpoint
from weights import load_model
from sampling import Sampling
import costs, reference, speculative
from engine import compiled
from tools import parts, session
from costs import Stats
from speculative import ModelDraft, NgramDraft, autoregressive_sample, random_bits, speculative_sample

PROMPT = [5, 17, 2, 33]

@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """A 2-layer target, a 1-layer draft that often agrees with it (the target's weights, scaled, less its second
  layer), and a second copy of the target."""
  root = tmp_path_factory.mktemp("models")
  target = write_checkpoint(root / "target", n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_ctx=48, seed=1,
                            std=0.3)
  draft = write_checkpoint(root / "draft", n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_ctx=48, seed=1,
                           std=0.2)
  return load_model(str(target)), ModelDraft(load_model(str(draft))), ModelDraft(load_model(str(target)))

@pytest.mark.parametrize("K", range(1, 7))
def test_greedy_speculative_equals_greedy_autoregressive(models, K):
  """At temperature 0, Algorithm 2 emits exactly Algorithm 1's tokens, through rejections and bonus tokens
  alike."""
  target, draft, _ = models
  expected, _ = autoregressive_sample(target, PROMPT, 30, sampling=Sampling(0))
  got, origins, stats = speculative_sample(target, draft, PROMPT, 30, K=K, sampling=Sampling(0))
  assert got == expected
  assert {"accepted", "resampled", "bonus"} <= set(origins)  # the run went through every branch of verify

@pytest.mark.parametrize("settings", [dict(), dict(top_k=5), dict(top_p=0.8),
                                      dict(temperature=0.7, top_k=10, top_p=0.9)])
def test_a_draft_equal_to_the_target_is_always_accepted(models, settings):
  """With p = q, r·p(x̃) < q(x̃) holds for every r < 1: α̂ = 1 exactly, and every round ends with a bonus
  token."""
  target, _, copy = models
  tokens, origins, stats = speculative_sample(target, copy, PROMPT, 40, K=2, seed=3, sampling=Sampling(**settings))
  assert stats.acceptance_rate == 1.0 and "resampled" not in origins and len(tokens) == 40

def test_same_seed_same_tokens(models):
  target, draft, _ = models
  runs = [speculative_sample(target, draft, PROMPT, 25, K=3, seed=s)[0] for s in (7, 7, 8)]
  assert runs[0] == runs[1] and runs[0] != runs[2]

@pytest.mark.parametrize("max_new", [1, 2, 7, 13])
def test_stops_at_exactly_max_new_tokens(models, max_new):
  """An all-accept round emits K+1 tokens; the last round is cut so the total is exact."""
  target, _, copy = models
  assert len(speculative_sample(target, copy, PROMPT, max_new, K=2)[0]) == max_new

def test_stops_at_eos_inside_an_accepted_draft(models):
  target, _, copy = models
  greedy, _ = autoregressive_sample(target, PROMPT, 20, sampling=Sampling(0), eos=None)
  eos = greedy[6]  # with p = q every draft is accepted, so this token arrives in the middle of a round
  tokens, origins, _ = speculative_sample(target, copy, PROMPT, 20, K=4, sampling=Sampling(0), eos=eos)
  assert tokens == greedy[:greedy.index(eos) + 1] and len(origins) == len(tokens)

def test_a_prompt_just_longer_than_a_block(models):
  """A 14-token prompt and K = 4 drafts make an 18-token first call with 5 outputs, which span two blocks of
  K+1 rows: the split must keep them all."""
  target, draft, _ = models
  prompt = (PROMPT * 4)[:14]
  expected, _ = autoregressive_sample(target, prompt, 12, sampling=Sampling(0))
  assert speculative_sample(target, draft, prompt, 12, K=4, sampling=Sampling(0))[0] == expected

def test_never_runs_past_the_context(models):
  """Near the end of the 48 positions K shrinks; generation stops when the context is full. (Greedy, as in the
  first test, whose compiled calls it replays.)"""
  target, draft, _ = models
  prompt = list(range(44))
  tokens, _, _ = speculative_sample(target, draft, prompt, 100, K=6, sampling=Sampling(0), eos=None)
  assert len(prompt) + len(tokens) == 48
  assert len(autoregressive_sample(target, prompt, 100, sampling=Sampling(0), eos=None)[0]) == 4

@pytest.mark.parametrize("K", [62, 63])
@pytest.mark.parametrize("prompt_len", [4, 46])
def test_the_widest_rounds_padding_never_reaches_the_tokens(models, K, prompt_len):
  """K = 62 runs the target's 63 rows padded to 64, K = 63 its 64 rows: with the prompt at the start of the
  context, and ending two tokens before its end (46 of 48), where the padding rows' positions lie past it.
  Greedy prompt lookup, whose drafts follow the repeating prompt, must still emit Algorithm 1's tokens."""
  target, _, _ = models
  prompt = (PROMPT * 12)[:prompt_len]
  expected, _ = autoregressive_sample(target, prompt, 40, sampling=Sampling(0), eos=None)
  got, origins, stats = speculative_sample(target, NgramDraft(), prompt, 40, K=K, sampling=Sampling(0), eos=None)
  assert got == expected and stats.drafted > 0

def test_ngram_draft_proposes_what_followed_the_latest_match():
  draft = NgramDraft(max_n=3)
  x = [1, 2, 3, 9, 1, 2, 3, 4, 5, 7, 2, 3]
  # (2, 3) last seen before 4; no 3-gram match
  assert draft.propose(x, 4) == [4, 5, 7, 2]
  # the 3-gram (2, 3, 4): the longest match wins
  assert draft.propose(x + [4], 2) == [5, 7]
  # nothing matches: propose nothing
  assert draft.propose([5, 6, 7, 8], 3) == []
  # at most what follows the match
  assert draft.propose([5, 6, 5], 3) == [6, 5]

def test_greedy_with_ngram_draft_equals_greedy_autoregressive(models):
  """--draft ngram --temperature 0 emits exactly the target's greedy continuation, through matches and
  misses."""
  target = models[0]
  prompt = PROMPT * 3
  expected, _ = autoregressive_sample(target, prompt, 30, sampling=Sampling(0))
  got, origins, stats = speculative_sample(target, NgramDraft(), prompt, 30, K=4, sampling=Sampling(0))
  assert got == expected
  assert {"accepted", "resampled", "target"} <= set(origins) and stats.drafted > 0
  assert stats.plain_rounds == origins.count("target")  # a round that proposed nothing: one plain target step

def test_acceptance_rate_counts_every_check(models, monkeypatch):
  """α̂ has one definition, Stats.acceptance_rate = accepted / checked drafts, counting every check that the
  round made, also those of a last round that max-new-tokens cuts. Recounting from each round's own answer
  (a accepted of k checked; a rejection unless a = k) must give the same; a count from the emitted tokens'
  origins (once used by the notebooks) differs when a cut drops accepted drafts."""
  target, draft, _ = models
  checks = []
  def counted(call, values, stats):
    out = run_call(call, values, stats)
    k, a = values[4], int(out[-2])
    checks.extend(["accepted"] * a + ["resampled"] * (a < k))
    return out
  run_call = speculative.run_call
  monkeypatch.setattr(speculative, "run_call", counted)
  runs = []
  for seed in range(4):
    for max_new in (5, 9):
      runs.append(speculative_sample(target, draft, PROMPT, max_new, K=4, seed=seed))
      assert runs[-1][2].acceptance_rate == checks.count("accepted") / len(checks)
      checks.clear()
  from_origins = [o.count("accepted") / max(o.count("accepted") + o.count("resampled"), 1)
                  for _, o, _ in runs]
  # the cut rounds make a difference
  assert any(a != s.acceptance_rate for a, (_, _, s) in zip(from_origins, runs))

def test_one_compiled_call_per_round(models):
  """After the prompt, a round is one compiled call (also near the context's end, where fewer drafts count),
  and Algorithm 1 one per token; the Stats' times nest."""
  target, draft, _ = models
  begin = time.perf_counter()
  _, _, stats = speculative_sample(target, draft, list(range(30)), 100, K=4, eos=None)
  assert stats.stopped_by == "the context" and stats.compiled_calls == stats.rounds > 3
  # the times add up: the rounds lie inside the run, the run inside the call
  assert stats.host_time <= stats.round_time <= stats.decode_time <= stats.total_time <= time.perf_counter() - begin
  _, base = autoregressive_sample(target, PROMPT, 7, eos=None)
  assert base.compiled_calls == base.rounds == 7

def test_the_warm_up_captures_every_call_a_lookup_run_makes(models, monkeypatch):
  """session.warm_up leaves no compile for the timed run: with prompt lookup whose warm-up text never repeats
  (its lookup finding nothing there but in a token repeated), the plain target step and the lookup round are
  both compiled and captured (a compile inside bench.py's timed run once cost a lookup run 4.5 s)."""
  target = models[0]
  monkeypatch.setattr(target, "calls", {})
  lookup = NgramDraft.propose
  monkeypatch.setattr(NgramDraft, "propose", lambda self, x, k: lookup(self, x, k) if len(x) == 2 else [])
  session.warm_up(target, NgramDraft(), list(range(10)), 3, Sampling(), 0)
  kinds = {key[0] for key in target.calls}
  assert {speculative.lookup_round, speculative.token_step} <= kinds, kinds
  assert all(call.jit.cnt >= 2 for call in target.calls.values()), {k: c.jit.cnt for k, c in target.calls.items()}

def test_time_calls_replays_the_calls_in_turn():
  """Each call is compiled and captured first (its first call), then all are replayed in turn, reps times, with
  their values, each read on the host where its flag says so: a slow spell of the machine falls on every one
  alike."""
  log = []
  class Call:
    def __init__(self, name: str):
      self.name, self.jit = name, types.SimpleNamespace(cnt=1)  # as Compiled: its first call captures
    def __call__(self, *values: int) -> Tensor:
      self.jit.cnt += 1
      log.append((self.name, values))
      return Tensor([0])
    def to_host(self, out: Tensor) -> None:
      log.append((self.name, "read"))
  times = compiled.time_calls([(Call("round"), [7, 8], True), (Call("step"), [9], False)], reps=3)
  assert len(times) == 2 and all(t > 0 for t in times)
  assert log == [("round", (7, 8)), ("step", (9,))] + [("round", (7, 8)), ("round", "read"), ("step", (9,))] * 3

def parts_timed(monkeypatch, target, draft, x: list[int], new_tokens: int,
                round_ms: float = 10.0) -> tuple[list, Stats]:
  """The calls that parts.time_parts times after a run of text x (each as the compiled call it times), and
  the Stats it fills in from times that time_calls is made to return: round_ms for the round, 4 ms for the
  target's K+1 rows, 1 ms for each of the draft's steps, 1.5 for the round's own work and 2 for Algorithm 1's
  call, t(1)."""
  seen, stats = [], Stats(new_tokens=new_tokens, rounds=1, drafted=4 * isinstance(draft, ModelDraft))
  def times(calls, reps):
    seen.extend(calls)
    return [round_ms / 1e3, 0.004, *[0.001] * (len(calls) - 4), 0.0015, 0.002]
  monkeypatch.setattr(parts, "time_calls", times)
  parts.time_parts(target, draft, 4, Sampling(), stats, x)
  return [(c, values) for c, values, _ in seen], stats

def test_time_parts_replays_a_round_its_parts_and_algorithm_1s_call_at_the_runs_middle(models, monkeypatch):
  """The round after the middle of the run's text (its last token repeated), its parts at the positions that
  round runs them: the target's K+1 rows (at n-1), the draft's first step (x_{n-1}, x_n at n-2), a later one (at
  n) and the round's own work, then Algorithm 1's call at n-1, the cost model's unit t(1); the round, its own
  work and Algorithm 1's call read on the host, as a run reads them. Near the context's end the round fits."""
  target, draft, _ = models
  x = list(range(30))
  calls, stats = parts_timed(monkeypatch, target, draft, x, new_tokens=10)
  r, n = x[:25] + [24], 26  # the last 10 // 2 tokens cut, the last token repeated
  assert [c.name for c, _ in calls] == ["a round: 1-layer draft, 2-layer target, K=4", "2 layers, 5 rows",
                                        "1 layers, 2 rows", "1 layers, 1 rows",
                                        "a round: 1-layer draft, 2-layer target, K=4, fixed_rows for the models' steps",
                                        "a token: 2-layer target"]
  round_values = [n - 2, 1, r[-2], r[-1], 4, 0, 0, n - 1]
  assert [v for _, v in calls] == [round_values, [n - 1, r[-1], 0, 0, 0, 0], [n - 2, r[-2], r[-1]], [n, r[-1]],
                                   round_values, [r[-1], 0, 0, n - 1]]
  assert calls[1][0] is compiled.step(target, 5, Sampling())
  assert calls[2][0] is compiled.step(draft.model, 2, Sampling())
  assert calls[4][0] is draft.round(target, r, 4, 4, Sampling(), forward=parts.fixed_rows)[0]
  assert calls[5][0] is speculative.token_step(target, Sampling())
  assert stats.round_replay_time == 0.010 and stats.draft_round_time == pytest.approx(0.004)
  assert stats.target_call_time == 0.004 and stats.work_time == 0.0015 and stats.token_call_time == 0.002
  # in t(1) = 2 ms: c = 1/2, its first step 1/2, s = 4/2, v = 1.5/2; a round costs 9.5/2 by its parts, and its
  # replay, 10 ms, is only compared with them
  assert stats.costs == pytest.approx(costs.Costs(4, 0.5, 0.5, 2.0, 0.75)) and stats.costs.round == 4.75
  assert stats.round_over_parts == pytest.approx(10 / 9.5)
  calls, _ = parts_timed(monkeypatch, target, draft, list(range(48)), new_tokens=2)  # a run that filled the context
  assert calls[0][1][-1] == 46 and calls[3][1][0] == 47  # the round's n - 1 and the draft's later step, inside 48

def test_time_parts_reads_the_round_its_own_work_and_algorithm_1s_call(models, monkeypatch):
  """A run reads each round's numbers and each token: time_parts times those three with their read, and the
  steps, whose results no run reads, without."""
  target, draft, _ = models
  seen = []
  monkeypatch.setattr(parts, "time_calls", lambda calls, reps: seen.extend(calls) or [0.001] * len(calls))
  parts.time_parts(target, draft, 4, Sampling(), Stats(new_tokens=4), list(range(20)))
  assert [read for _, _, read in seen] == [True, False, False, False, True, True]

def test_the_prediction_is_made_without_the_round(models, monkeypatch):
  """predicted_speedup prices a round from its parts, each timed alone: a replayed round twice as slow changes
  round ÷ its parts and leaves the prediction as it was; and it differs from E·t(1) ÷ the replayed
  round, what the prediction was when it priced the round's own work as the replay less its parts."""
  target, draft, _ = models
  run = dict(new_tokens=40, rounds=16, drafted=64, accepted=30, rejected=10)
  (_, one), (_, two) = [parts_timed(monkeypatch, target, draft, list(range(30)), 10, ms) for ms in (10, 20)]
  for stats in (one, two):
    stats.__dict__.update(run)
  alpha = one.acceptance_rate
  assert costs.predicted_speedup(alpha, one.costs) == costs.predicted_speedup(alpha, two.costs)
  assert two.round_over_parts == pytest.approx(2 * one.round_over_parts)
  from_replay = costs.expected_tokens_per_round(alpha, 4) * one.token_call_time / one.round_replay_time
  assert costs.predicted_speedup(alpha, one.costs) == pytest.approx(from_replay * 10 / 9.5)

def test_time_parts_without_the_baseline_leaves_t1_untimed(models, monkeypatch):
  """Without baseline (speculative.py without --compare) Algorithm 1's call is neither compiled nor timed."""
  target, draft, _ = models
  seen, stats = [], Stats(new_tokens=4)
  monkeypatch.setattr(parts, "time_calls",
                      lambda calls, reps: seen.extend(calls) or [0.010, 0.004, 0.001, 0.001, 0.0015])
  parts.time_parts(target, draft, 4, Sampling(), stats, list(range(20)), baseline=False)
  assert "a token" not in " ".join(c.name for c, _, _ in seen) and np.isnan(stats.token_call_time)
  assert stats.target_call_time == 0.004 and stats.work_time == 0.0015 and np.isnan(stats.costs.s)

def test_time_parts_replays_prompt_lookups_round_where_nothing_repeats(models, monkeypatch):
  """Prompt lookup's round is timed even on text where nothing repeats (where a run would take a plain target
  step): the repeated last token gives it a match. It has no steps of its own: its parts are the target's K+1
  rows and the round's own work, which binds the round's drafts; its lookups are priced from the run's."""
  target, _, _ = models
  calls, stats = parts_timed(monkeypatch, target, NgramDraft(), list(range(20)), new_tokens=0)
  assert [c.name for c, _ in calls] == ["a lookup round: 2-layer target, K=4", "2 layers, 5 rows",
                                        "a lookup round: 2-layer target, K=4, fixed_rows for the models' steps",
                                        "a token: 2-layer target"]
  assert calls[0][1] == calls[2][1] == [19, 19, 0, 0, 0, 1, 0, 0, 20]  # x_n; the one draft x̃_1 = x_n
  assert stats.round_parts_time == pytest.approx(0.0055) and stats.host_draft_time == 0

def test_the_rounds_own_work_runs_the_rounds_kernels_without_the_models(models):
  """The round's own work (its call with parts.fixed_rows for the models' steps) launches only kernels that the
  round launches (by name), and fewer. With p and q
  uniform a model draft's round accepts all k drafts; prompt lookup's one-hot p passes a test only with
  probability q(x̃) = 1/V, and at this seed fails the first. It is among the target's calls, which the kernel
  search (session.search_kernels) searches."""
  target, draft, _ = models
  x = PROMPT * 3
  parts.fix_rows(target, 4)
  for kind, model, sampling in ((draft, draft.model, Sampling()), (NgramDraft(), None, Sampling(0))):
    speculative_sample(target, kind, x, 12, K=4, sampling=sampling, eos=None)  # compiles its round
    work, values, _ = kind.round(target, x, 4, 4, sampling, forward=parts.fixed_rows)
    values = [*values[:-1], 3, 5, 6, len(x) - 1]  # k = 3 drafts count; seed 5, round 6
    result = [work.to_host(work(*values)).copy() for _ in range(2)][-1]  # capture, then replay
    whole = kind.round(target, x, 4, 4, sampling)[0]
    assert work.kernel_names() < whole.kernel_names() and work in compiled.calls(target)
    assert result.shape == (4 + 3,) and result[-1] == 0 and result[-2] == (3 if model else 0)

# ***** the cost model *****

def test_leviathans_ideal_is_the_cost_model_at_s_1_and_v_0():
  """E / (Kc + 1) is the cost model's prediction where the target's K+1 rows cost one token's call, the round
  costs nothing else and every draft step costs c; each extra cost lowers it."""
  for alpha, K, c in [(0.0, 1, 0.1), (0.5, 4, 0.05), (0.71, 3, 0.2), (0.95, 8, 0.0), (1.0, 4, 0.3)]:
    ideal = costs.ideal_speedup(alpha, K, c)
    assert costs.predicted_speedup(alpha, costs.Costs(K, c, c, 1.0, 0.0)) == pytest.approx(ideal)
    assert costs.predicted_speedup(alpha, costs.Costs(K, c, 2 * c + 0.1, 1.5, 0.2)) < ideal
  assert costs.expected_tokens_per_round(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)  # 1 + α + α²

@pytest.mark.parametrize("K, c, first, s, v", [(4, 0.05, 0.08, 1.3, 0.1), (4, 0.24, 0.41, 2.13, 0.1),
                                               (1, 0.3, 0.3, 1.2, 0.0), (8, 0.1, 0.1, 3.0, 1.0)])
def test_break_even_alpha_is_where_the_cost_model_gives_1x(K, c, first, s, v):
  round_costs = costs.Costs(K, c, first, s, v)
  alpha = costs.break_even_alpha(round_costs)
  assert 0 < alpha < 1 and costs.predicted_speedup(alpha, round_costs) == pytest.approx(1.0, abs=1e-9)
  assert costs.predicted_speedup(alpha - 0.01, round_costs) < 1 < costs.predicted_speedup(alpha + 0.01, round_costs)

def test_break_even_alpha_at_the_edges():
  """0 where a round costs at most one token's call (any α pays); None where even K+1 tokens a round, every
  draft accepted, would not pay for it."""
  assert costs.break_even_alpha(costs.Costs(4, 0.0, 0.0, 0.9, 0.1)) == 0.0
  assert costs.break_even_alpha(costs.Costs(4, 0.5, 0.5, 3.0, 0.0)) is None  # a round: 5 = K+1
  assert costs.break_even_alpha(costs.Costs(2, 0.9, 1.2, 2.5, 0.5)) is None

def project_imports(main_blocks: bool) -> dict[str, set[str]]:
  """Which of the repository's modules (dotted: engine.compiled) each one imports, read from its source, with or
  without what its `if __name__ == "__main__":` block imports (never what an `if TYPE_CHECKING:` block names)."""
  paths = {".".join(p.relative_to(REPO).with_suffix("").parts): p
           for p in [*REPO.glob("*.py"), *REPO.glob("*/*.py")] if p.parent.name not in ("tests",)}
  paths = {("notebook_helpers" if name.startswith("notebooks.") else name): p for name, p in paths.items()
           if not name.endswith("__init__")}
  graph = {}
  for name, path in paths.items():
    tree = ast.parse(path.read_text())
    main = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
            for n in ast.walk(node)} if not main_blocks else set()
    main |= {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
             for n in ast.walk(node)}  # names for type hints alone: nothing runs them
    found = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) and id(n) not in main for a in n.names}
    for n in ast.walk(tree):
      if isinstance(n, ast.ImportFrom) and n.module and id(n) not in main:
        found |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
    graph[name] = found & paths.keys()
  return graph

def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
  """Every import circle, each as the modules it passes through, from its first in sorted order."""
  found = set()
  def walk(path: list[str]) -> None:
    for m in graph[path[-1]]:
      if m in path:
        circle = path[path.index(m):]
        first = circle.index(min(circle))
        found.add(tuple(circle[first:] + circle[:first]))
      else:
        walk(path + [m])
  for name in graph:
    walk([name])
  return found

LAYERS = {"engine": 0, "lesson": 1, "demo": 2, "tools": 2, "notebooks": 3}  # a module imports its layer or below

def layer(module: str) -> str:
  """The room a module lives in: its folder, or the lesson for the files at the root."""
  return module.split(".")[0] if "." in module or module == "notebook_helpers" else "lesson"

def test_an_edit_to_any_traced_file_changes_every_calls_key(tmp_path):
  """Every compiled call's signature holds compiled.SOURCE, the hash of the TRACED files: an edit to any of them
  changes it, so that a kernel searched before the edit counts as not searched (else a stale "searched" flag
  would search inside a timed run)."""
  for f in compiled.TRACED:
    (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / f).write_bytes((REPO / f).read_bytes())
  before = compiled.source_hash(tmp_path)
  assert before == compiled.SOURCE
  for f in compiled.TRACED:
    text = (tmp_path / f).read_bytes()
    (tmp_path / f).write_bytes(text + b"# an edit\n")
    assert compiled.source_hash(tmp_path) != before, f
    (tmp_path / f).write_bytes(text)

def test_traced_holds_every_file_a_compiled_call_runs(models):
  """The files whose functions run while a compiled call captures (a round of each kind, Algorithm 1's token and a
  step) are all in compiled.TRACED: an edit to any file a call traces changes its key."""
  target, draft, _ = models
  ran = set()
  def profile(frame, event, arg):
    if event == "call" and (path := pathlib.Path(frame.f_code.co_filename)).is_relative_to(REPO):
      ran.add(path.relative_to(REPO).as_posix())
  built = [speculative.model_round(target, draft.model, 1, Sampling()), speculative.lookup_round(target, 1, Sampling()),
           speculative.token_step(target, Sampling()), compiled.step(target, 3, Sampling())]
  for call in built:
    fresh = compiled.Compiled(call.name, call.signature, 0, call.build)
    sys.setprofile(profile)
    try:
      fresh(*[1] * len(fresh.variables))
    finally:
      sys.setprofile(None)
  assert {"speculative.py", "sampling.py", "gpt2.py", "engine/compiled.py"} <= ran <= set(compiled.TRACED)

def test_imports_run_one_way():
  """The tools import the lesson, the lesson imports the engine, the engine imports neither; the only circle is
  speculative.py's `__main__` block, which hands over to the command line (tools.cli imports speculative)."""
  graph = project_imports(main_blocks=False)
  assert {"speculative", "engine.compiled", "tools.cli", "tools.parts"} <= graph.keys()
  upward = {(m, i) for m, imported in graph.items() for i in imported
            if LAYERS[layer(i)] > LAYERS[layer(m).replace("notebook_helpers", "notebooks")]}
  assert upward == set() and circles(graph) == set()
  through_main = circles(project_imports(main_blocks=True))  # each from speculative's __main__ to tools.cli
  assert through_main and all(circle[:2] == ("speculative", "tools.cli") for circle in through_main)
  assert graph["costs"] == set()

def test_measured_over_predicted_is_the_product_of_its_terms():
  """Four terms, each 1 where its side of the prediction held, multiply to measured ÷ predicted; rounds that
  emit fewer tokens in the same time move the tokens term alone."""
  spec = Stats(new_tokens=60, rounds=20, drafted=80, accepted=45, rejected=15, decode_time=1.2,
               draft_first_time=0.004, draft_call_time=0.003, draft_round_time=0.013, target_call_time=0.02,
               work_time=0.005, round_replay_time=0.037, token_call_time=0.016)
  base = Stats(new_tokens=60, rounds=60, decode_time=1.0)
  for run in (spec, dataclasses.replace(spec, new_tokens=50)):
    terms = costs.measured_over_predicted(run, base)
    predicted = costs.predicted_speedup(run.acceptance_rate, run.costs)
    assert math.prod(terms.values()) == pytest.approx(base.ms_per_token / run.ms_per_token / predicted)
    assert terms["parts"] == pytest.approx(0.016 * run.costs.round / 0.037)  # by the parts ÷ the replay
    assert terms["replay"] == pytest.approx(0.037 / (1.2 / 20)) and terms["baseline"] == pytest.approx(1 / 60 / 0.016)
  assert terms["tokens"] == pytest.approx(2.5 / costs.expected_tokens_per_round(0.75, 4))

def test_prompt_lookups_plain_rounds_cost_t1_for_one_token():
  """A round where prompt lookup finds nothing is a plain target step, one token for t(1): the cost model mixes
  such rounds in at their share, K counting the drafts of a round that drafts; all plain, it predicts 1x."""
  stats = Stats(new_tokens=30, rounds=20, drafted=30, accepted=10, rejected=5, plain_rounds=5, propose_time=0.003,
                draft_call_time=0.0001, target_call_time=0.02, work_time=0.002, token_call_time=0.01)
  m, E = stats.costs, costs.expected_tokens_per_round(2 / 3, 2)
  assert (m.K, m.plain, m.c, m.first) == pytest.approx((2, 0.25, 0.01, 0.01))
  assert costs.predicted_speedup(2 / 3, m) == pytest.approx((0.75 * E + 0.25) / (0.75 * (0.02 + 2 + 0.2) + 0.25))
  assert stats.host_draft_time == pytest.approx(2 * 0.0001)  # a drafting round's lookups: K·c, in seconds
  # a round replayed alone, as the parts term divides by it and the command line prints it: a drafting round
  # with its lookups, a plain round at t(1)
  replayed = dataclasses.replace(stats, round_replay_time=0.03, decode_time=0.5)
  assert replayed.round_alone_time == pytest.approx(0.75 * (0.03 + 2 * 0.0001) + 0.25 * 0.01)
  terms = costs.measured_over_predicted(replayed, Stats(new_tokens=30, rounds=30, decode_time=0.3))
  assert terms["parts"] == pytest.approx(m.round * 0.01 / replayed.round_alone_time)
  alpha = costs.break_even_alpha(m)
  assert costs.predicted_speedup(alpha, m) == pytest.approx(1.0)
  everything_plain = dataclasses.replace(m, plain=1.0)
  assert costs.predicted_speedup(0.5, everything_plain) == 1.0 and costs.break_even_alpha(everything_plain) == 0.0

def test_the_speedup_compares_the_decode_not_the_prefill(models):
  """ms_per_token and tokens_per_second leave the prompt's prefill out: decode_time starts after it."""
  target, draft, _ = models
  _, _, stats = speculative_sample(target, draft, list(range(40)), 4, K=3, eos=None)  # test_same_seed's round
  assert 0 < stats.decode_time < stats.total_time
  assert stats.ms_per_token == pytest.approx(1e3 * stats.decode_time / 4)
  assert stats.tokens_per_second == pytest.approx(4 / stats.decode_time)

def test_stats_say_what_stopped_the_run(models):
  target, draft, copy = models
  assert speculative_sample(target, draft, PROMPT, 5)[2].stopped_by == "max-new-tokens"
  assert speculative_sample(target, draft, list(range(44)), 100, eos=None)[2].stopped_by == "the context"
  greedy, _ = autoregressive_sample(target, PROMPT, 20, sampling=Sampling(0), eos=None)
  assert speculative_sample(target, copy, PROMPT, 20, sampling=Sampling(0),
                            eos=greedy[3])[2].stopped_by == "end-of-text"

def test_to_probs_filters_as_documented():
  """Temperature, top-k and top-p against a plain NumPy reading of their definitions."""
  logits = np.array([[2.0, 1.0, 0.5, 0.5, -1.0, 3.0]], np.float32)
  def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()
  probs = lambda **kw: Sampling(**kw)(Tensor(logits)).numpy()[0]
  assert np.array_equal(probs(temperature=0), np.eye(6)[5])
  np.testing.assert_allclose(probs(temperature=0.5), softmax(logits[0] / 0.5), atol=1e-6)
  np.testing.assert_allclose(probs(top_k=2), softmax(np.where(logits[0] >= 2.0, logits[0], -np.inf)),
                             atol=1e-6)
  np.testing.assert_allclose(probs(top_k=3), softmax(np.where(logits[0] >= 1.0, logits[0], -np.inf)),
                             atol=1e-6)
  # sorted: 0.60, 0.22, 0.08, ... so top-p 0.7 keeps the first two, top-p 0.5 only the first
  full = softmax(logits[0])
  np.testing.assert_allclose(probs(top_p=0.7), np.where(full >= full[0], full, 0) / full[[5, 0]].sum(),
                             atol=1e-6)
  assert np.array_equal(probs(top_p=0.5) > 0, np.eye(6, dtype=bool)[5])

def test_verify_rejects_what_the_target_cannot_emit():
  """A draft token with q(x̃) = 0 is never accepted, whatever r is; the resample then comes from (q - p)+: on
  the device (200 rounds in one batch) and in the NumPy reference alike. A zero-weight token is never drawn."""
  p, q = np.array([[0.5, 0.5, 0.0]]), np.array([[0.0, 0.4, 0.6], [1.0, 0.0, 0.0]])
  N = 200
  out = speculative.verify(Tensor.zeros(N, 1, dtype="int32"), Tensor(p, dtype="float32").expand(N, 1, 3),
                           Tensor(q, dtype="float32").expand(N, 2, 3), 1, random_bits(0, 0, 3 * N).reshape(N, 3))
  out = out.numpy()
  assert (out[:, 0] == 2).all() and (out[:, -1] == 0).all()  # (q - p)+ = [0, 0, 0.6], a = 0
  rng = np.random.default_rng(0)
  for _ in range(N):
    tokens, origins = reference.verify([0], p, q, rng)
    assert origins == ["resampled"] and tokens[0] == 2
  weights = Tensor([[0.3, 0.0, 0.7]]).expand(500, 3)
  assert (speculative.draw(weights, random_bits(1, 0, 1000).reshape(500, 2)).numpy() != 1).all()
  assert all(reference.sample(np.array([0.3, 0.0, 0.7]), rng) != 1 for _ in range(500))

def test_nan_probabilities_end_the_run_with_one_sentence(tmp_path):
  """Corrupt weights (here a NaN in the target's last layer norm) raise the flag that every compiled call
  returns, and the run ends with the sentence to fetch the weights again, in Algorithm 2 and Algorithm 1."""
  shape = dict(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_ctx=32)
  target = load_model(str(write_checkpoint(tmp_path / "target", **shape)))
  draft = ModelDraft(load_model(str(write_checkpoint(tmp_path / "draft", seed=3, **shape))))
  target.ln_f.bias.assign(Tensor.full(target.ln_f.bias.shape, float("nan"))).realize()
  # a one-token prompt and K = 1: the fewest compiled calls (no prefill), on models of their own
  for run in (lambda: speculative_sample(target, draft, [1], 4, K=1),
              lambda: autoregressive_sample(target, [1], 4)):
    with pytest.raises(FloatingPointError, match="NaN or infinite probabilities: its weights may be corrupt"):
      run()

# ***** the command line, run as a user runs it *****

def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
  return run_script("speculative.py", *args, env=env)

@pytest.fixture(scope="module")
def gpt2_vocab_models(tmp_path_factory):
  """Tiny depth and width, GPT-2's full 50257-token vocabulary, so the real tokenizer applies."""
  if not TOKENIZER_DIR.is_dir():
    pytest.skip(f"the GPT-2 tokenizer files are not in {TOKENIZER_DIR} (see tests/tiny.py)")
  root = tmp_path_factory.mktemp("cli")
  shape = dict(n_layer=1, n_head=2, n_embd=16, vocab_size=50257, n_ctx=64, seed=4)
  return [str(write_checkpoint(root / "target", std=0.5, **shape)),
          str(write_checkpoint(root / "draft", std=0.45, **shape)),
          "--tokenizer", str(TOKENIZER_DIR)]

@pytest.mark.slow
def test_cli_prints_text_and_stats(gpt2_vocab_models):
  target, draft, *tok = gpt2_vocab_models
  args = ["--prompt", "Alan Turing theorized that", "--target", target, "--draft", draft, *tok,
          "--max-new-tokens", "12", "--seed", "1"]
  first, second = cli(*args), cli(*args)
  assert first.returncode == 0, first.stderr
  assert (first.stdout.startswith("Alan Turing theorized that") and "acceptance rate α̂" in first.stdout
          and "new tokens            12" in first.stdout)
  assert re.search(r"round's own work      \d+\.\d\d ms \(its draws, tests and read, compiled and timed alone\)",
                   first.stdout), first.stdout
  assert re.search(r"round ÷ its parts     \d+\.\d\d \(replayed in turn after the run: a round "
                   r"\d+\.\d\d ms, its parts and own work \d+\.\d\d ms\)", first.stdout), first.stdout
  assert "not predicted: the cost model prices a round in t(1), Algorithm 1's call, which --compare times" \
    in first.stdout
  text = lambda out: out.split("\n\n---")[0]
  assert text(first.stdout) == text(second.stdout)  # same seed, same tokens

@pytest.mark.slow
def test_cli_compare_and_trace(gpt2_vocab_models):
  target, draft, *tok = gpt2_vocab_models
  out = cli("--prompt", "Hello", "--target", target, "--draft", draft, *tok, "--max-new-tokens", "10",
            "--compare", "--trace", "-K", "3")
  assert out.returncode == 0, out.stderr
  assert "Algorithm 1 (auto-regressive)" in out.stdout and "\033[3" in out.stdout
  # the cost model, credited, factor by factor from Leviathan et al.'s ideal to the prediction from the parts,
  # beside the measured speedup, where the two differ term by term, and the break-even α
  assert "cost model            Leviathan et al. (2022), in t(1) = " in out.stdout
  for name in ["E", "c", "s", "v"]:
    assert re.search(rf"^  {name} +\d+\.\d+ ", out.stdout, re.M), name
  chain = re.findall(r"^  (ideal|with s|with first step|with v = predicted) +(\d+\.\d\d)x", out.stdout, re.M)
  assert [name for name, _ in chain] == ["ideal", "with s", "with first step", "with v = predicted"]
  measured = re.search(r"speedup +(\d+\.\d\d)x measured, (\d+\.\d\d)x predicted", out.stdout)
  assert measured and measured.group(2) == chain[-1][1]
  ratio = re.search(r"^measured ÷ predicted  (\d+\.\d\d) = the product of these terms \(furthest from 1: "
                    r"(tokens a round|parts ÷ round|replay ÷ run|Algorithm 1 ÷ t\(1\))\)", out.stdout, re.M)
  terms = re.findall(r"^  (tokens a round|parts ÷ round|replay ÷ run|Algorithm 1 ÷ t\(1\)) +(\d+\.\d\d)  ",
                     out.stdout, re.M)
  assert ratio and [name for name, _ in terms] == ["tokens a round", "parts ÷ round", "replay ÷ run",
                                                   "Algorithm 1 ÷ t(1)"]
  assert float(ratio.group(1)) == pytest.approx(math.prod(float(x) for _, x in terms), abs=0.03)
  assert re.search(r"break-even α +(\d\.\d\d|none at this K) ", out.stdout)
  printed = {shape(line) for line in out.stdout.splitlines()}
  assert [line for line in readme_stats_block() if shape(line) not in printed] == []

def shape(line: str) -> str:
  """A stats line with its figures and the run's own words (which term is furthest from 1) blanked."""
  line = re.sub(r"\(furthest from 1: .*\)$", "(furthest from 1: …)", line.strip())
  return re.sub(r"none at this K|\d+(?:\.\d+)?", "#", line)

def readme_stats_block() -> list[str]:
  """The stats lines of the README's try-it block (a run's output, wrapped), unwrapped: the block's lines from
  Algorithm 2's counts on, a continuation (22 spaces in) joined to the line before."""
  readme = (REPO / "README.md").read_text(encoding="utf-8")
  block = readme.split("## Try it with no download", 1)[1].split("--- Algorithm 2", 1)[1].split("```", 1)[0]
  lines: list[str] = []
  for line in block.splitlines()[1:]:
    if line.startswith(" " * 22):  # a continuation (of the header's, before the first stats line: skipped)
      lines[-1:] = [lines[-1] + " " + line.strip()] if lines else []
    elif line.strip():
      lines.append(line)
  return lines

@pytest.mark.slow
def test_cli_ngram_draft_greedy_prints_the_targets_greedy_text(gpt2_vocab_models):
  """--draft ngram --temperature 0 --compare: Algorithm 2's text is exactly Algorithm 1's greedy text."""
  target, _, *tok = gpt2_vocab_models
  out = cli("--prompt", "one two one two one two", "--target", target, "--draft", "ngram", *tok,
            "--temperature", "0", "--max-new-tokens", "16", "--compare")
  assert out.returncode == 0, out.stderr
  alg2 = out.stdout.split("\n\n--- Algorithm 2")[0]
  alg1 = out.stdout.split("\n\n--- Algorithm 1")[0].rsplit("\n\n", 1)[-1].strip()
  assert alg2.strip() == alg1 and "draft ngram" in out.stdout

@pytest.mark.slow
def test_cli_says_that_the_context_ended_the_run(gpt2_vocab_models):
  """A run that the context cuts short says so, rather than printing fewer tokens without a word."""
  target, draft, *tok = gpt2_vocab_models
  out = cli("--prompt", "word " * 58, "--target", target, "--draft", draft, *tok, "--max-new-tokens", "32")
  assert out.returncode == 0, out.stderr
  assert "(stopped by the context)" in out.stdout

def bad_inputs(target: str, draft: str, tokenizer: list[str], small_vocab: str, not_a_checkpoint: str):
  ok = ["--target", target, "--draft", draft, *tokenizer]
  return {
    "empty prompt": (["--prompt", "", *ok], "prompt is empty"),
    "prompt past the context": (["--prompt", "word " * 80, *ok], "context holds 64"),
    "K < 1": (["--prompt", "Hi", "-K", "0", *ok], "K (the lookahead) is 0: it must be in 1..63"),
    "K past the widest step": (["--prompt", "Hi", "-K", "64", *ok],
                               "K (the lookahead) is 64: it must be in 1..63"),
    "max-new-tokens < 1": (["--prompt", "Hi", "--max-new-tokens", "0", *ok], "max-new-tokens is 0"),
    "temperature < 0": (["--prompt", "Hi", "--temperature", "-1", *ok], "temperature is -1.0"),
    "top-k < 0": (["--prompt", "Hi", "--top-k", "-2", *ok], "top-k is -2"),
    "top-p of 0": (["--prompt", "Hi", "--top-p", "0", *ok], "(0, 1]"),
    "top-p above 1": (["--prompt", "Hi", "--top-p", "1.5", *ok], "(0, 1]"),
    "unknown model": (["--prompt", "Hi", "--target", "gpt5", "--draft", draft, *tokenizer],
                      "Unknown model 'gpt5'"),
    "not a checkpoint": (["--prompt", "Hi", "--target", target, "--draft", not_a_checkpoint, *tokenizer],
                         "not a GPT-2 checkpoint"),
    "different vocabularies": (["--prompt", "Hi", "--target", target, "--draft", small_vocab, *tokenizer],
                               "vocabulary"),
    "unknown device": (["--prompt", "Hi", "--device", "NOPE", *ok], "device NOPE is not usable here"),
    "no network": (["--prompt", "Hi", "--target", "gpt2", "--draft", draft, *tokenizer],
                   "Could not download"),
    "n-gram length < 1": (["--prompt", "Hi", "--draft", "ngram", "--ngram-max", "0", "--target", target,
                           *tokenizer],
                          "n-gram length is 0"),
  }

def test_cli_bad_input_gets_one_sentence_and_exit_2(gpt2_vocab_models, tmp_path):
  target, draft, *tok = gpt2_vocab_models
  small = str(write_checkpoint(tmp_path / "small", n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_ctx=64))
  (tmp_path / "empty").mkdir()
  # port 9 (discard) refuses
  no_network = {"HF_ENDPOINT": "http://127.0.0.1:9", "XDG_CACHE_HOME": str(tmp_path / "cache")}
  for case, (args, message) in bad_inputs(target, draft, tok, small, str(tmp_path / "empty")).items():
    out = cli(*args, env=no_network)
    assert out.returncode == 2 and message in out.stderr, f"{case}: {out.stderr}"
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, \
      f"{case}: {out.stderr}"

@pytest.mark.slow
def test_with_dev_unset_a_cpu_opencl_driver_gives_way_to_the_cpu_device(gpt2_vocab_models):
  """With DEV unset, tinygrad picks OpenCL where a driver is installed; where that driver runs on this machine's
  CPU (pocl, as CI installs it), the run uses tinygrad's CPU device instead and says so in one line."""
  target, draft, *tok = gpt2_vocab_models
  env = {k: v for k, v in os.environ.items() if k != "DEV"}
  out = subprocess.run([sys.executable, str(REPO / "speculative.py"), "--prompt", "Hello", "--target", target,
                        "--draft", draft, *tok, "--max-new-tokens", "4"], capture_output=True, text=True,
                       cwd=REPO, env={**env, "BEAM": "0"}, timeout=600)
  assert out.returncode == 0, out.stderr
  which = "from tinygrad import Device; from engine.compiled import on_host_cpu; print(Device.DEFAULT, on_host_cpu(Device.DEFAULT))"
  picked, on_cpu = subprocess.run([sys.executable, "-c", which], capture_output=True, text=True, cwd=REPO,
                                  env=env).stdout.split()
  if picked != "CPU" and on_cpu == "True":  # pocl here: the run moved to the CPU device
    assert "an OpenCL driver on this machine's CPU" in out.stderr and "device CPU" in out.stdout, out.stderr
  else:
    assert f"device {picked}" in out.stdout and "OpenCL driver" not in out.stderr

def searched_kernels(cache: str) -> int:
  """How many kernel searches the tinygrad cache at `cache` holds."""
  import tinygrad.helpers
  try:
    return sqlite3.connect(cache).execute(f"SELECT count(*) FROM beam_search_{tinygrad.helpers.VERSION}").fetchone()[0]
  except sqlite3.OperationalError:  # no search yet: no table
    return 0

@pytest.mark.slow
def test_the_search_stops_at_its_bound_and_the_next_run_goes_on(gpt2_vocab_models, tmp_path):
  """A run whose search outlasts --search-minutes stops it by itself, says how far it got, and exits 0 soon
  after the bound; what it searched stays in the cache, and the next run goes on from there to the end."""
  target, draft, *tok = gpt2_vocab_models
  cache = str(tmp_path / "cache.db")
  args = ["--prompt", "Hello", "--target", target, "--draft", draft, *tok, "--max-new-tokens", "6"]
  bounded = cli(*args, "--search-minutes", "0.05", env={"BEAM": "1", "CACHEDB": cache})
  assert bounded.returncode == 0, bounded.stderr
  assert "this run's bound" in bounded.stderr and "the next run goes on from there" in bounded.stderr, bounded.stderr
  assert "searched: later runs use these kernels" not in bounded.stderr and "Traceback" not in bounded.stderr
  first = searched_kernels(cache)
  assert first > 0, "nothing searched within the bound: no progress to go on from"
  rest = cli(*args, env={"BEAM": "1", "CACHEDB": cache})
  assert rest.returncode == 0 and "searched: later runs use these kernels" in rest.stderr, rest.stderr
  assert searched_kernels(cache) > first

@pytest.mark.slow
def test_first_run_says_its_kernels_are_not_searched_and_ctrl_c_ends_the_search(gpt2_vocab_models, tmp_path):
  """With the search on and an empty cache, a run compiles tinygrad's default kernels only, says so, prints
  its text, and then searches for later runs, with a line on stderr at least every 10 seconds. Ctrl-C
  (SIGINT) during that search ends the run with one line and exit code 130, no traceback; the cache stays
  usable: it passes SQLite's integrity check and the next run uses it."""
  target, draft, *tok = gpt2_vocab_models
  env = {**os.environ, "DEV": os.environ.get("DEV", "CPU"), "BEAM": "1", "PYTHONUNBUFFERED": "1",
         "CACHEDB": str(tmp_path / "cache.db")}
  args = [sys.executable, str(REPO / "speculative.py"), "--prompt", "Hello", "--target", target,
          "--draft", draft, *tok, "--max-new-tokens", "6"]
  run = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=REPO)
  lines, searching = [], threading.Event()
  def read() -> None:
    for line in run.stderr:
      lines.append((time.perf_counter(), line))
      if line.startswith("searching the fastest kernels"):
        searching.set()
  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  assert searching.wait(300), "".join(l for _, l in lines)
  time.sleep(5)  # well into the search
  run.send_signal(signal.SIGINT)
  stdout = run.stdout.read()  # to the end: the run has exited
  run.wait(60)
  reader.join(60)
  stderr = "".join(l for _, l in lines)
  assert run.returncode == 130 and stderr.rstrip().endswith("interrupted"), stderr
  assert "Traceback" not in stderr and "not searched yet" in stderr and "new tokens            6" in stdout
  gaps = np.diff([t for t, _ in lines])
  assert gaps.max() < 10, f"{gaps.max():.1f} s without a line on stderr"
  assert sqlite3.connect(tmp_path / "cache.db").execute("PRAGMA integrity_check").fetchone()[0] == "ok"
  again = cli("--prompt", "Hello", "--target", target, "--draft", draft, *tok, "--max-new-tokens", "6",
              env={"CACHEDB": str(tmp_path / "cache.db")})
  text = lambda out: out.split("\n\n---")[0]
  assert again.returncode == 0 and text(again.stdout) == text(stdout), again.stderr

def test_the_setting_is_named_with_its_filters():
  """The costs a run measures depend on its filters (each is work a step does): the command lines name them."""
  assert session.setting(Sampling(0.7, 50, 0.9)) == "temperature 0.7, top-k 50, top-p 0.9"
  assert session.setting(Sampling(1.0, 0, 0.95)) == "temperature 1, top-p 0.95"
  assert session.setting(Sampling(0, 50, 0.9)) == "greedy" and session.setting(Sampling()) == "temperature 1"
