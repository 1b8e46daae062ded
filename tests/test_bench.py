"""bench.py runs as a user runs it, on tiny models: its table, its plots, its JSON and its --scoring output.

The tests check what is printed and written, never a timing value: the machine running them may be busy.
"""
import json, math, pathlib, re, sqlite3, subprocess
import pytest
import costs
from tools.bench import row_costs
from tiny import TOKENIZER_DIR, run_script, write_checkpoint

def bench(*args: str) -> subprocess.CompletedProcess:
  return run_script("tools.bench", *args)

def table_rows(stdout: str) -> list[list[str]]:
  """The table's rows split into cells: the lines after its header (with meas/pred) up to a blank one."""
  lines = stdout.splitlines()
  start = next(i for i, line in enumerate(lines) if "meas/pred" in line) + 1
  end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
  return [line.split() for line in lines[start:end]]

def tiny_pair(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
  """A target and a draft checkpoint of one tiny shape (1 layer, 16 wide, 64 tokens), different weights."""
  shape = dict(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_ctx=64)
  return write_checkpoint(folder / "target", seed=1, **shape), write_checkpoint(folder / "draft", seed=2, **shape)

@pytest.mark.slow
def test_sweep_prints_the_table_and_writes_plots_and_json(tmp_path):
  pytest.importorskip("matplotlib", reason="--sweep draws with matplotlib: see requirements-dev.txt")
  target, draft = tiny_pair(tmp_path)
  out = bench("--target", str(target), "--draft", str(draft), "--sweep", "1,2", "--max-new-tokens", "6",
              "--prompts", "2", "--bandwidth", "10", "--out", str(tmp_path / "out"))
  assert out.returncode == 0, out.stderr
  assert [row[0] for row in table_rows(out.stdout)] == ["1", "2"]
  results = json.loads((tmp_path / "out" / "t1.json").read_text())
  assert [row["K"] for row in results["rows"]] == [1, 2] and results["bandwidth"] == 10e9
  for row in results["rows"]:  # the cost model's figures beside the measured speedup (the decode's)
    assert {"c_first", "c", "s", "v", "predicted", "predicted_ideal", "break_even_alpha", "speedup"} <= row.keys()
    priced = row_costs(row)  # the parts, each timed alone: the replayed round only checks them
    assert row["predicted"] == pytest.approx(costs.predicted_speedup(row["alpha"], priced))
    assert row["v"] == pytest.approx(row["work_ms"] / row["t1_ms"]) and "o" not in row
    assert row["round_over_parts"] == pytest.approx(row["round_replay_ms"] / row["t1_ms"] / priced.round)
    terms = row["measured_over_predicted_terms"]
    assert math.prod(terms.values()) == pytest.approx(row["measured_over_predicted"])
    assert row["speedup"] == pytest.approx(row["alg1_ms_per_token"] / row["alg2_ms_per_token"])
    even = row["break_even_alpha"]
    assert even is None or even == 0 or costs.predicted_speedup(even, priced) == pytest.approx(1.0)
  assert len(list((tmp_path / "out").glob("*.png"))) == 3

@pytest.mark.slow
def test_table_has_ms_per_round_the_alpha_line_and_the_floor(tmp_path):
  out = bench("--random", "--target", "1,2,16", "--draft", "1,1,8", "-K", "2", "--max-new-tokens", "4",
              "--prompts", "1", "--greedy", "--bandwidth", "100", "--out", str(tmp_path))
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  header = next(i for i, line in enumerate(lines) if "meas/pred" in line)
  assert "ms/round" in lines[header] and [row[0] for row in table_rows(out.stdout)] == ["2"]
  end = lines[header].index("ms/round") + len("ms/round")  # the columns are right-aligned under their headers
  assert re.fullmatch(r"\d+\.\d\d", lines[header + 1][:end].split()[-1])
  end = lines[header].index("round/parts") + len("round/parts")  # a round over its parts, timed in turn
  assert re.fullmatch(r"\d+\.\d\d", lines[header + 1][:end].split()[-1])
  assert lines[header].split()[-1] == "calls/round" and lines[header + 1].split()[-1] == "1.00"  # one call a round
  assert re.search(r"predicted at α = 0\.71 .*K=2 \d+\.\d\dx; the best measured K there: 2", out.stdout, re.S)
  assert "memory-bandwidth floor" in out.stdout
  assert re.search(r"Algorithm 1 per token: .*x the floor", out.stdout)
  assert re.search(r"a target step of K\+1 = 3 rows, alone: .*x the floor", out.stdout)
  step = r"1\srow\s\d+\s\(\d\.\d\dx\),\s3\srows\s\d+\s\(\d\.\d\dx\)"  # kernels (bytes ÷ weights), wrapped
  assert re.search(rf"kernels per step.*:\starget\s{step};\sdraft\s{step}", out.stdout, re.S)
  assert "runs (K values × prompts)" in out.stderr
  assert "kernels: tinygrad's default ones (the search is off" in out.stdout  # the suite runs with BEAM=0

@pytest.mark.slow
def test_scoring_prints_total_host_and_ratio_per_m():
  out = bench("--random", "--target", "1,2,16", "--scoring")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  header = next(i for i, line in enumerate(lines) if "total ms" in line)
  assert lines[header].split() == ["m", "total", "ms", "host", "ms", "host", "share", "t(m)/t(1)", "GFLOP/s",
                                   "kernels", "bytes", "÷", "weights"]
  rows = [line.split() for line in lines[header + 1:header + 9]]
  assert [row[0] for row in rows] == [str(T) for T in range(1, 9)]
  assert all(re.fullmatch(r"\d+\.\d{3}", row[1]) and re.fullmatch(r"\d+\.\d{3}", row[2]) for row in rows)
  assert rows[0][4] == "1.00" and all(re.fullmatch(r"\d+\.\d\d", row[4]) for row in rows)
  assert all(re.fullmatch(r"\d+\.\d", row[5]) for row in rows)
  kernels = [int(row[6]) for row in rows]  # more rows add the causal mask and token ids, a few kernels
  assert kernels[0] < kernels[1] <= kernels[-1] <= kernels[0] + 12, kernels
  # a tiny model's weights are mostly its embedding, so its logits and their softmax weigh more than in GPT-2
  assert all(re.fullmatch(r"\d+\.\d{3}", row[7]) and float(row[7]) > 0.9 for row in rows)
  assert "memory-bandwidth floor" in out.stdout and "x the floor" in out.stdout  # the bandwidth, measured
  assert "kernels: tinygrad's default ones" in out.stdout

@pytest.mark.slow
def test_bench_never_searches_unless_asked(tmp_path):
  """With the search on but nothing searched on this machine, bench.py times tinygrad's default kernels, says
  so, and searches nothing: a search never lands in a timing (--search runs it first, untimed)."""
  out = run_script("tools.bench", "--random", "--target", "1,2,16", "--scoring",
                   env={"BEAM": "1", "CACHEDB": str(tmp_path / "cache.db")})
  assert out.returncode == 0, out.stderr
  assert "not searched yet on this machine (--search searches them first, untimed)" in out.stdout
  tables = sqlite3.connect(tmp_path / "cache.db").execute("SELECT name FROM sqlite_master").fetchall()
  assert not [t for t, in tables if t.startswith("beam_search")]

@pytest.mark.slow
def test_search_covers_the_steps_that_the_round_is_timed_against(tmp_path):
  """--search searches every compiled call before timing, the steps that a round's parts are timed on included
  (the draft's 2-row and 1-row steps, the target's K+1 rows and 1 row): else the round would run searched
  kernels and its parts default ones, and round/parts and c would compare the two. The kernels line says
  "searched" only when no compiled call is left with default kernels."""
  target, draft = tiny_pair(tmp_path)
  out = run_script("tools.bench", "--target", str(target), "--draft", str(draft), "-K", "2", "--max-new-tokens", "4",
                   "--prompts", "1", "--bandwidth", "10", "--search", "--out", str(tmp_path / "out"),
                   env={"BEAM": "1", "CACHEDB": str(tmp_path / "cache.db")})
  assert out.returncode == 0, out.stderr
  assert "kernels: searched (tinygrad's BEAM search, cached on this machine)" in out.stdout, out.stdout[-1500:]

@pytest.mark.slow
def test_scoring_on_null_reports_host_work_and_no_arithmetic_rate():
  # DEV=NULL runs no kernel: a GFLOP/s figure there would be a fiction, and the floor needs a given bandwidth
  out = run_script("tools.bench", "--random", "--target", "1,2,16", "--scoring", "--bandwidth", "100",
                   env={"DEV": "NULL", "NULL_ALLOW_COPYOUT": "1"})
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  header = next(i for i, line in enumerate(lines) if "total ms" in line)
  assert [line.split()[5] for line in lines[header + 1:header + 9]] == ["-"] * 8
  assert "host work only" in out.stdout

@pytest.mark.slow
@pytest.mark.skipif(not TOKENIZER_DIR.is_dir(), reason=f"--prompt needs GPT-2's tokenizer in {TOKENIZER_DIR}")
def test_own_prompt_is_used_whole(tmp_path):
  prompt = "one two three one two three one two three one two"
  out = bench("--random", "--target", "1,2,16", "--draft", "ngram", "--greedy", "--prompt", prompt,
              "--prompts", "2", "--max-new-tokens", "4", "--bandwidth", "100",
              "--tokenizer", str(TOKENIZER_DIR), "--out", str(tmp_path))
  assert out.returncode == 0, out.stderr
  results = json.loads((tmp_path / "greedy.json").read_text())
  assert len(results["prompts"]) == 2 and results["prompts"][0] == results["prompts"][1]
  assert len(results["prompts"][0]) > 8  # whole, not cut to the built-in prompts' 8 tokens

def test_bad_settings_get_one_sentence_and_exit_2():
  cases = [(["--random", "--target", "2,3,16", "--draft", "1,2,8"], "not a multiple of n_head"),
           (["-K", "0"], "K (the lookahead) is 0"), (["--max-new-tokens", "0"], "max-new-tokens is 0"),
           (["--bandwidth", "0"], "--bandwidth is 0"), (["--sweep", "1,x"], "--sweep is '1,x'")]
  for args, message in cases:
    out = bench(*args)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, args
