"""tools/reproduce.py, the paper's experiment on the real pair, proven here without the real files: its statistics
on their own, Theorem 1's test on a tiny pair with GPT-2's vocabulary (it passes, its control and a broken round
are rejected), its refusals, and, in the slow tier, the whole command as a user runs it, its checkpoints downloaded
under the real names (gpt2-xl, gpt2) from a local server in the Hub's layout, and the real tier (tests/test_real.py)
run on that same pair."""
from __future__ import annotations
import json, os, re, socket, subprocess, sys
import numpy as np, pytest
from scipy import stats
from hub import Hub
from tiny import REPO, TOKENIZER_DIR, run_script, write_checkpoint
import speculative
from costs import Stats
from speculative import ModelDraft
from tools import reproduce
from tools.reproduce import PUBLISHED, THRESHOLD, alpha_interval, chisquare, control_law, power, pvalue
from tools.session import main
from weights import load_model, load_tokenizer

# a tiny pair with GPT-2's vocabulary, so that GPT-2's tokenizer drives it: the draft is the target with noise
# added, so that it agrees with it in part (β = Σ min(p, q) about 0.15 to 0.3 at the theorem's prefixes), as a
# real draft does; n_ctx holds the greedy check's tokens after the prompt
PAIR = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=50257, n_ctx=512)
NUCLEUS = reproduce.SETTINGS["xsum-nucleus"][0]
PREFIXES = lambda: reproduce.theorem_prefixes(load_tokenizer(TOKENIZER_DIR), json.loads(reproduce.PROMPTS.read_text()))

def write_pair(folder) -> dict[str, object]:
  """The tiny pair's checkpoints under the real names: {name: folder}."""
  return {"gpt2-xl": write_checkpoint(folder / "gpt2-xl", seed=3, **PAIR),
          "gpt2": write_checkpoint(folder / "gpt2", seed=3, noise=0.15, **PAIR)}

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
  return write_pair(tmp_path_factory.mktemp("pair"))

def load_pair(pair: dict) -> tuple[object, ModelDraft]:
  return load_model(str(pair["gpt2-xl"])), ModelDraft(load_model(str(pair["gpt2"])))

# ***** the statistics *****

def test_chisquare_is_pearsons_over_pooled_bins():
  """chisquare gives scipy's statistic on the pooled bins; a count where q is 0 is infinite; one bin, nothing."""
  rng = np.random.default_rng(0)
  q = rng.dirichlet(np.full(300, 0.3))
  counts = rng.multinomial(2000, q)
  statistic, dof = chisquare(counts, q)
  order = np.argsort(q)
  observed, expected = counts[order], 2000 * q[order]
  n = max(int((expected < 5).sum()), int(np.searchsorted(np.cumsum(expected), 5)) + 1)
  observed, expected = np.r_[observed[:n].sum(), observed[n:]], np.r_[expected[:n].sum(), expected[n:]]
  assert (expected >= 5).all() and dof == len(expected) - 1
  assert statistic == pytest.approx(stats.chisquare(observed, expected).statistic)
  assert pvalue(statistic, dof) == pytest.approx(stats.chisquare(observed, expected).pvalue)
  assert chisquare(np.array([3, 1]), np.array([1.0, 0.0]))[0] == np.inf and pvalue(np.inf, 1) == 0
  assert chisquare(np.array([9, 0]), np.array([1.0, 0.0])) == (0.0, 0) and pvalue(0.0, 0) == 1.0

def test_the_controls_law_and_the_tests_power():
  """The control's law is q only when p = q; the test's power against it grows with N, and is the false-alarm
  rate (THRESHOLD) when there is nothing to find."""
  rng = np.random.default_rng(1)
  q, p = rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))
  law = control_law(q, p)
  assert law.sum() == pytest.approx(1) and np.abs(law - q).sum() > 0.05
  np.testing.assert_allclose(control_law(q, q), q)
  assert power([(q, q)], 1000) == pytest.approx(THRESHOLD)
  assert power([(q, law)], 100) < power([(q, law)], 1000) < power([(q, law)], 5000)

def test_the_alpha_interval_is_a_bootstrap_over_prompts():
  """α̂'s interval holds the pooled α̂, is a point when every prompt has the same α̂, and is wide when prompts
  disagree."""
  def runs(counts: list[tuple[int, int]]) -> list[tuple[Stats, Stats]]:
    return [(Stats(), Stats(accepted=a, rejected=r)) for a, r in counts]
  same = alpha_interval(runs([(30, 10)] * 5))
  assert same == pytest.approx([0.75, 0.75])
  lo, hi = alpha_interval(runs([(10, 30), (30, 10), (20, 20), (35, 5), (5, 35)]))
  assert lo < 0.5 < hi and hi - lo > 0.2

def test_the_greedy_opening_is_compared_sentence_by_sentence():
  """The text after the prompt matches 2, 1 or 0 of the published sentences, in order."""
  matched = reproduce.sentences_matched
  assert matched("".join(PUBLISHED) + " Later, he") == 2
  assert matched(PUBLISHED[0] + " In 1950 he wrote") == 1
  assert matched(" so powerful that they could think.") == 0
  assert matched(PUBLISHED[1]) == 0  # the second sentence alone is no opening

# ***** Theorem 1's test, on a tiny pair *****

def test_theorem_passes_and_its_control_is_rejected(pair):
  """At the command's three prefixes, N = 500 rounds each: the first tokens pass against q after top-p 0.8's
  filter, and the control (a draw from q after a rejection) is rejected by the same pooled test (its power there,
  computed: above 0.99)."""
  target, draft = load_pair(pair)
  r = reproduce.theorem(target, draft, PREFIXES(), NUCLEUS, 500, reproduce.Progress(1500, "rounds"))
  lines = "\n".join(reproduce.theorem_lines(r))
  print(lines)
  assert r["ours"]["p_value"] > THRESHOLD and r["control"]["p_value"] < THRESHOLD and r["passed"], lines
  assert r["control_power"] > 0.99 and len(r["prefixes"]) == 3 and r["ours"]["dof"] > 10, lines

def test_theorem_rejects_a_round_that_forgets_the_residual(pair, monkeypatch):
  """The same test on a round whose rejection draws from q instead of (q − p)+, the control's mistake made on the
  device this time, before the round compiles: rejected at N = 600 (its power there, computed: above 0.99)."""
  monkeypatch.setattr(speculative, "residual", lambda q_t, p_t: q_t)
  target, draft = load_pair(pair)  # models of their own, so that the broken round is compiled for them
  r = reproduce.theorem(target, draft, PREFIXES(), NUCLEUS, 600, reproduce.Progress(1800, "rounds"))
  lines = "\n".join(reproduce.theorem_lines(r))
  print(lines)
  assert r["control_power"] > 0.99 and r["ours"]["p_value"] < THRESHOLD and not r["passed"], lines

def test_greedy_check_sees_a_round_that_accepts_every_draft(pair, monkeypatch):
  """The greedy check on a round whose test accepts every draft (the draft's own argmax then stands for the
  target's): Algorithm 2's tokens differ from Algorithm 1's, and the check fails, naming the first that differs."""
  monkeypatch.setattr(speculative, "accept", lambda r, p_x, q_x: r >= 0)
  target, draft = load_pair(pair)
  r = reproduce.greedy_check(target, draft, load_tokenizer(TOKENIZER_DIR), 24, published=False)
  lines = "\n".join(reproduce.greedy_lines(r))
  assert not r["same_tokens"] and not r["passed"] and r["first_difference"] is not None, lines
  assert "DIFFER from Algorithm 1's from token" in lines and "not compared" in lines

# ***** refusals *****

@pytest.mark.parametrize("argv, says", [
  (["--ks", "0"], "K (the lookahead) is 0"),
  (["--ks", "1,x"], "--ks is '1,x'"),
  (["--prompts", "17"], "--prompts is 17"),
  (["--parts", "table,plots"], "--parts is 'table,plots'"),
  (["--settings", "xsum"], "--settings is 'xsum'"),
  (["--theorem-n", "5"], "--theorem-n is 5"),
  (["--max-new-tokens", "0"], "max-new-tokens is 0"),
  (["--target", "gpt3"], "Unknown model 'gpt3'"),
  (["--draft", "ngram"], "The draft must be a model"),
])
def test_bad_input_is_refused_in_words(argv, says, capsys, tmp_path, monkeypatch):
  """Each bad input ends the command with exit code 2 and a line that says what to do, before any model loads (a
  missing model's line names the other one too if it cannot be had either, as speculative.py's does)."""
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert main(reproduce.run, reproduce.parse_args(argv)) == 2
  err = capsys.readouterr().err
  last = err.strip().splitlines()[-1]
  assert last.startswith("error: ") and says in last and last.endswith(".") and "Traceback" not in err, err

# ***** the whole command, as a user runs it *****

@pytest.fixture
def served(pair, tmp_path):
  """The tiny pair served under the real names by a local HTTP server in the Hub's layout, and an empty cache:
  the environment a command needs to download them as a user's first run does."""
  hub = Hub(pair)
  yield hub, {"HF_ENDPOINT": hub.url, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
  hub.close()

@pytest.mark.slow  # a fresh process compiles the pair's rounds at three settings: a minute or two
def test_the_command_downloads_predicts_then_measures_and_writes_its_json(served, pair, tmp_path):
  """python -m tools.reproduce downloads the pair under its real names, prints the greedy check, Theorem 1's tests
  and each setting's prediction before its timed runs and then its Table 1, draws Figure 1's three panels a
  setting, and writes a dated JSON with what the README's results table needs. On the tiny pair the greedy
  opening differs from the published one, so its exit code is 1 and it says which check failed."""
  hub, env = served
  out = tmp_path / "out"
  run = run_script("tools.reproduce", "--ks", "1,2", "--prompts", "2", "--max-new-tokens", "8", "--theorem-n",
                   "300", "--greedy-tokens", "24", "--out", str(out), env=env)
  text = run.stdout
  assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
  files = ("config.json", "model.safetensors")
  assert set(hub.requests) >= {f"/openai-community/{name}/resolve/main/{f}" for name in pair for f in files}
  assert "Algorithm 2's tokens equal Algorithm 1's; its opening DIFFERS from the published one's" in text
  for name, (sampling, task) in reproduce.SETTINGS.items():
    predicted, table = text.index(f"predicted for {name} ("), text.index(f"Table 1, {name} (")
    assert predicted < table and f"2 {task} prompts × 8 new tokens" in text[table:]
  assert text.count("rejected, as it must be") == 2 and text.count(": passes") == 2
  assert re.search(r"checks: greedy FAILED; theorem, temperature 1, top-p 0.8 passed; theorem, temperature 0.8, "
                   r"top-p 0.95 passed", text), text[-2000:]
  [path] = out.glob("reproduce-*.json")
  assert re.fullmatch(r"reproduce-\d{4}-\d\d-\d\dT\d{4}Z\.json", path.name)
  result = json.loads(path.read_text())
  assert {"date", "machine", "device", "dtype", "commit", "tinygrad", "memory_after_loading"} <= result.keys()
  assert result["dtype"] == "float32" and result["greedy"]["same_tokens"] and not result["greedy"]["passed"]
  for name, table in result["table"].items():
    assert [row["K"] for row in table["rows"]] == [1, 2] and len(table["plots"]) == 3
    for row in table["rows"]:
      lo, hi = row["alpha_interval"]
      assert lo <= row["alpha"] <= hi and row["predicted_before"] > 0 and row["speedup"] > 0
  assert len(list(out.glob("*.png"))) == 9 and len(result["readme_rows"]) == 3
  assert all(row.startswith("| gpt2-xl drafted by gpt2, ") and row.count("|") == 8 for row in result["readme_rows"])

def real_tier(env: dict) -> subprocess.CompletedProcess:
  """python -m pytest -m real as a user runs the opt-in tier (in one process: tests/conftest.py spreads no real
  tier over the cores)."""
  return subprocess.run([sys.executable, "-m", "pytest", "-m", "real", "-p", "no:cacheprovider",
                         "tests/test_real.py"], capture_output=True, text=True, cwd=REPO,
                        env={**os.environ, "DEV": "CPU", **env}, timeout=900)

@pytest.mark.slow  # the real tier in a fresh process: it compiles the pair's rounds and loads it twice more
def test_the_real_tier_runs_on_the_pair_it_downloads(served, monkeypatch):
  """The real tier, its checkpoints the tiny pair under the real names: the transformers comparison, the one-step
  chi-square and the memory report pass, Algorithm 2 equals Algorithm 1 at temperature 0, and the published
  opening, which a tiny pair cannot write, fails: the tier's checks run, and can fail."""
  hub, env = served
  run = real_tier(env)
  out = run.stdout
  assert re.search(r"1 failed, 4 passed", out) and "workers" not in out, out[-4000:]
  assert "FAILED tests/test_real.py::test_greedy_check_matches_the_published_opening" in out
  assert re.search(r"loading gpt2-xl beside gpt2, float32: peak host memory [\d.]+ GB", out), out[-4000:]

def test_the_real_tier_skips_in_one_sentence_without_the_weights(tmp_path):
  """With no cached weights and no network, every real test is skipped, saying what to do."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    run = real_tier({"HF_ENDPOINT": closed, "XDG_CACHE_HOME": str(tmp_path)})
  assert re.search(r"5 skipped", run.stdout), run.stdout[-3000:]
  assert "Could not download" in run.stdout and "pass that folder instead of the name" in run.stdout
