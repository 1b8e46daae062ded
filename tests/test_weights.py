"""weights.py: downloads from a real local HTTP server in the Hub's layout, the cache, offline use, and
one-sentence LoadErrors."""
from __future__ import annotations
import json, os, shutil, signal, socket, subprocess, sys, threading, time
import numpy as np, pytest
import tiktoken, tiktoken.registry
from tinygrad import dtypes
from tinygrad.nn.state import safe_load
from hub import Hub
from tiny import TOKENIZER_DIR, hub_tensors, write_checkpoint
import weights
from engine import compiled
from weights import LoadError, load_model, load_tokenizer

SHAPE = dict(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_ctx=32)
TOKENS = [3, 14, 15, 9, 26, 5]
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

def logits(model, tokens: list[int]) -> np.ndarray:
  return compiled.logits(model, tokens, 0)

def one_sentence(e: pytest.ExceptionInfo) -> str:
  msg = str(e.value)
  assert "\n" not in msg and msg.endswith(".") and ". " not in msg, f"not one sentence: {msg!r}"
  return msg

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  return write_checkpoint(tmp_path_factory.mktemp("ckpt"), **SHAPE)

@pytest.fixture
def closed_port():
  """A port on 127.0.0.1 that refuses connections: bound, never listening, held until the test ends."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    yield s.getsockname()[1]

@pytest.fixture
def cache(tmp_path, monkeypatch):
  """An empty XDG_CACHE_HOME and no proxies, so requests to 127.0.0.1 go straight to it."""
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  for v in PROXY_VARS:
    monkeypatch.delenv(v, raising=False)
  return weights.cache_dir()

@pytest.fixture
def hub(checkpoint, cache, monkeypatch):
  """A real HTTP server holding the tiny checkpoint as openai-community/gpt2, HF_ENDPOINT pointing at it."""
  server = Hub({"gpt2": checkpoint})
  monkeypatch.setenv("HF_ENDPOINT", server.url)
  yield server
  server.close()

# --- downloads ---

@pytest.mark.parametrize("mode", ["direct", "redirect"])
def test_download_then_cache(hub, checkpoint, cache, mode):
  """The first load downloads both files (sha256 checked, also via the 302), gives the local folder's logits;
  the second makes no request."""
  hub.mode = mode
  model = load_model("gpt2")
  expected = ["/openai-community/gpt2/resolve/main/config.json",
              "/openai-community/gpt2/resolve/main/model.safetensors"]
  assert hub.requests == expected + (["/cdn/gpt2/model.safetensors"] if mode == "redirect" else [])
  assert sorted(os.listdir(cache / "gpt2")) == ["config.json", "model.safetensors"]
  for f in ("config.json", "model.safetensors"):
    assert (cache / "gpt2" / f).read_bytes() == (checkpoint / f).read_bytes()
  np.testing.assert_array_equal(logits(model, TOKENS), logits(load_model(str(checkpoint)), TOKENS))
  n = len(hub.requests)
  load_model("gpt2")
  assert len(hub.requests) == n

@pytest.mark.parametrize("mode", ["truncate", "reset"])
def test_cut_short_download_is_refused_then_resumed(hub, cache, checkpoint, mode):
  """A response that stops before its Content-Length, or a connection reset mid-file, is refused as cut short;
  nothing half-written is loaded, the partial file is the only trace, and the retry asks only for the missing
  bytes and leaves no partial file."""
  hub.mode = mode
  with pytest.raises(LoadError, match="cut short") as e:
    load_model("gpt2")
  one_sentence(e)
  assert sorted(os.listdir(cache / "gpt2")) == ["config.json", "model.safetensors.incomplete"]
  have = (cache / "gpt2" / "model.safetensors.incomplete").stat().st_size
  hub.mode, n = "direct", len(hub.requests)
  load_model("gpt2")
  assert hub.requests[n:] == ["/openai-community/gpt2/resolve/main/model.safetensors"]
  assert hub.ranges == [f"bytes={have}-"]
  assert sorted(os.listdir(cache / "gpt2")) == ["config.json", "model.safetensors"]
  assert (cache / "gpt2" / "model.safetensors").read_bytes() == \
    (checkpoint / "model.safetensors").read_bytes()

# the program a loading process runs: it says when it starts to load, and when it is done
LOAD = "\n".join(["import weights", "print('loading', flush=True)", "weights.load_model('gpt2')",
                  "print('loaded')"])

def loader(hub, cache) -> subprocess.Popen:
  """A separate Python process that loads gpt2 from the test's Hub into the test's cache."""
  env = {**os.environ, "HF_ENDPOINT": hub.url, "XDG_CACHE_HOME": str(cache.parent),
         "DEV": os.environ.get("DEV", "CPU")}
  for v in PROXY_VARS:
    env.pop(v, None)
  return subprocess.Popen([sys.executable, "-c", LOAD], cwd=weights.__file__.rsplit("/", 1)[0], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

def wait_for(condition, seconds: float = 60) -> None:
  deadline = time.monotonic() + seconds
  while not condition():
    assert time.monotonic() < deadline, "timed out"
    time.sleep(0.05)

def says(stream, text: str) -> bool:
  """Read a process's output line by line until one has text (True) or the output ends (False)."""
  return any(text in line for line in stream)

@pytest.mark.parametrize("mode", ["direct", "redirect"])
def test_killed_download_resumes_with_a_range_request(hub, cache, checkpoint, mode):
  """A loading process killed mid-download (SIGKILL: no Python cleanup runs) leaves its partial file; the
  retry continues from its end with a Range request (through the Hub's 302 too), and no partial file
  remains."""
  hub.mode = "stall"
  proc = loader(hub, cache)
  partial = cache / "gpt2" / "model.safetensors.incomplete"
  wait_for(lambda: partial.is_file() and partial.stat().st_size > 0)
  proc.send_signal(signal.SIGKILL)
  assert proc.wait(30) == -signal.SIGKILL  # killed mid-download, not ended by itself
  have = partial.stat().st_size
  hub.mode = mode
  np.testing.assert_array_equal(logits(load_model("gpt2"), TOKENS),
                                logits(load_model(str(checkpoint)), TOKENS))
  assert hub.ranges == [f"bytes={have}-"] and 0 < have < (checkpoint / "model.safetensors").stat().st_size
  assert sorted(os.listdir(cache / "gpt2")) == ["config.json", "model.safetensors"]

def test_server_that_ignores_range_starts_over(hub, cache, checkpoint):
  """If the server answers a Range request with the whole file (200), the download starts over cleanly."""
  data = (checkpoint / "model.safetensors").read_bytes()
  (cache / "gpt2").mkdir(parents=True)
  (cache / "gpt2" / "model.safetensors.incomplete").write_bytes(data[:len(data) // 3])
  hub.mode = "no-range"
  load_model("gpt2")
  assert hub.ranges == [f"bytes={len(data) // 3}-"]
  assert (cache / "gpt2" / "model.safetensors").read_bytes() == data
  assert sorted(os.listdir(cache / "gpt2")) == ["config.json", "model.safetensors"]

def test_corrupt_partial_file_is_refused_and_deleted(hub, cache, checkpoint):
  """A partial file with wrong bytes fails the sha256 of the whole file: refused, deleted; the next run starts
  over."""
  (cache / "gpt2").mkdir(parents=True)
  (cache / "gpt2" / "model.safetensors.incomplete").write_bytes(np.random.default_rng(0).bytes(1000))
  with pytest.raises(LoadError, match="corrupt") as e:
    load_model("gpt2")
  one_sentence(e)
  assert os.listdir(cache / "gpt2") == ["config.json"]
  load_model("gpt2")
  assert (cache / "gpt2" / "model.safetensors").read_bytes() == \
    (checkpoint / "model.safetensors").read_bytes()

def test_two_processes_loading_at_once_download_once(hub, cache, checkpoint):
  """Two processes loading the same model at once: while the first is mid-download, the second waits on the
  lock (and says so), then finds the file complete. Both load it, it is downloaded once, and it is whole."""
  hub.hold.clear()  # the first process's download pauses half-way until the second is waiting
  first = loader(hub, cache)
  partial = cache / "gpt2" / "model.safetensors.incomplete"
  wait_for(lambda: partial.is_file() and partial.stat().st_size > 0)
  second = loader(hub, cache)
  waiting = says(second.stderr, "Waiting for another process")  # reads until it does, or until it ends
  hub.hold.set()
  outs = [first.communicate(timeout=120)[0], second.stdout.read()]
  assert second.wait(120) == 0 and first.returncode == 0 and waiting, outs
  assert outs[0].split() == ["loading", "loaded"] and outs[1].split() == ["loading", "loaded"]
  assert hub.requests.count("/openai-community/gpt2/resolve/main/model.safetensors") == 1
  assert (cache / "gpt2" / "model.safetensors").read_bytes() == \
    (checkpoint / "model.safetensors").read_bytes()
  assert sorted(os.listdir(cache / "gpt2")) == ["config.json", "model.safetensors"]

def test_partial_as_long_as_the_file_starts_over(hub, cache, checkpoint):
  """A partial file with nothing left to ask for gets a 416 to its Range request: it is dropped, and the
  download starts over."""
  data = (checkpoint / "model.safetensors").read_bytes()
  (cache / "gpt2").mkdir(parents=True)
  (cache / "gpt2" / "model.safetensors.incomplete").write_bytes(bytes(len(data)))
  load_model("gpt2")
  assert hub.ranges == [f"bytes={len(data)}-"]
  assert (cache / "gpt2" / "model.safetensors").read_bytes() == data
  assert sorted(os.listdir(cache / "gpt2")) == ["config.json", "model.safetensors"]

def test_config_json_is_fetched_whole_not_resumed(hub, cache, checkpoint):
  """config.json is small and comes with no sha256 to check a resumed file against: a leftover partial file
  is replaced by a fresh download of the whole file, with no Range request."""
  (cache / "gpt2").mkdir(parents=True)
  (cache / "gpt2" / "config.json.incomplete").write_text('{"n_layer": 99, ')
  load_model("gpt2")
  assert hub.ranges == []
  assert (cache / "gpt2" / "config.json").read_bytes() == (checkpoint / "config.json").read_bytes()
  assert sorted(os.listdir(cache / "gpt2")) == ["config.json", "model.safetensors"]

def finishes(fn, seconds: float = 60) -> bool:
  """Whether fn() returns within the time, run in a thread (which is left behind if it does not)."""
  thread = threading.Thread(target=fn, daemon=True)
  thread.start()
  thread.join(seconds)
  return not thread.is_alive()

def test_the_lock_is_per_model_and_only_for_downloads(hub, cache):
  """A download of one model does not hold up another model's download, nor the load of a cached model."""
  with weights.download_lock("gpt2-xl"):
    assert finishes(lambda: load_model("gpt2"))  # a download, while gpt2-xl's lock is taken
  with weights.download_lock("gpt2"):
    assert finishes(lambda: load_model("gpt2"))  # cached: no lock needed

@pytest.mark.parametrize("mode", ["direct", "redirect"])
def test_wrong_sha256_is_refused_and_leaves_nothing(hub, cache, mode):
  """Bytes that do not match the announced sha256 (on the response, or on the Hub's 302) are refused as
  corrupt and not kept."""
  hub.mode, hub.bad_sha = mode, True
  with pytest.raises(LoadError, match="corrupt") as e:
    load_model("gpt2")
  one_sentence(e)
  assert os.listdir(cache / "gpt2") == ["config.json"]

def test_missing_file_on_the_server(hub, cache):
  """A 404 (the server has no such repository) is a LoadError naming the status, and makes no cache folder."""
  with pytest.raises(LoadError, match="404") as e:
    load_model("gpt2-medium")
  one_sentence(e)
  assert not (cache / "gpt2-medium").exists()

def test_no_network_says_to_use_a_folder(cache, closed_port, monkeypatch):
  """With the endpoint unreachable, the LoadError tells the user to put config.json and model.safetensors in a
  folder."""
  monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
  with pytest.raises(LoadError, match="put config.json and model.safetensors .* in a folder") as e:
    load_model("gpt2")
  one_sentence(e)

def test_cache_that_cannot_be_written(hub, tmp_path, monkeypatch):
  """A cache location that is no folder (here a file) is a LoadError that says to point XDG_CACHE_HOME
  elsewhere."""
  (tmp_path / "a-file").write_text("")
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
  with pytest.raises(LoadError, match="point XDG_CACHE_HOME at a folder you can write to") as e:
    load_model("gpt2")
  one_sentence(e)

# --- clear errors for bad names and bad files ---

def test_unknown_model_name(cache):
  """A name that is neither a preset nor a folder is refused, listing the presets."""
  with pytest.raises(LoadError, match="Unknown model 'gpt3'.*gpt2-medium") as e:
    load_model("gpt3")
  one_sentence(e)

def test_folder_without_safetensors(tmp_path):
  """A folder lacking model.safetensors is refused, naming the missing file."""
  write_checkpoint(tmp_path, **SHAPE)
  (tmp_path / "model.safetensors").unlink()
  with pytest.raises(LoadError, match="has no model.safetensors") as e:
    load_model(str(tmp_path))
  one_sentence(e)

def with_config(checkpoint, tmp_path, **changes):
  """A copy of the checkpoint whose config.json has these keys changed."""
  folder = shutil.copytree(checkpoint, tmp_path / "ckpt")
  config = json.loads((folder / "config.json").read_text())
  (folder / "config.json").write_text(json.dumps(config | changes))
  return folder

@pytest.mark.parametrize("key,value", [("n_embd", 32), ("n_layer", 2), ("vocab_size", 65),
                                       ("n_positions", 64)])
def test_tensors_that_do_not_match_the_config(checkpoint, tmp_path, key, value):
  """A config.json that disagrees with the tensors (wider, deeper, shallower, other vocab or context) is
  refused, naming a tensor."""
  folder = with_config(checkpoint, tmp_path, **{key: value})
  with pytest.raises(LoadError, match="does not match its config.json: tensor") as e:
    load_model(str(folder))
  one_sentence(e)

@pytest.mark.parametrize("damage", ["garbage", "header cut", "data cut", "one byte short", "empty"])
def test_corrupt_safetensors(checkpoint, tmp_path, damage):
  """Garbage bytes, or a model.safetensors cut anywhere, is refused with advice to fetch it again."""
  folder = shutil.copytree(checkpoint, tmp_path / "ckpt")
  data = (folder / "model.safetensors").read_bytes()
  bad = {"garbage": np.random.default_rng(0).bytes(len(data)), "header cut": data[:40],
         "data cut": data[:len(data) // 2], "one byte short": data[:-1], "empty": b""}[damage]
  (folder / "model.safetensors").write_bytes(bad)
  with pytest.raises(LoadError, match="Cannot read .*model.safetensors.*fetch it again") as e:
    load_model(str(folder))
  one_sentence(e)
  # say what is wrong: the size against what the header promises, or that there is no header at all
  if damage in ("data cut", "one byte short"):
    assert f"is {len(bad):,} bytes but its header promises {len(data):,}, so it is cut short" in str(e.value)
  else:
    assert f"its {len(bad):,} bytes hold no safetensors header" in str(e.value)

@pytest.mark.parametrize("text", ["{not json", "", "[1, 2]", '{"n_layer": 1}'])
def test_config_that_is_not_json(checkpoint, tmp_path, text):
  """A config.json that is not JSON, or not a JSON object with GPT-2's keys, is refused, naming the file."""
  folder = shutil.copytree(checkpoint, tmp_path / "ckpt")
  (folder / "config.json").write_text(text)
  with pytest.raises(LoadError, match="config.json is not a GPT-2 config") as e:
    load_model(str(folder))
  one_sentence(e)

@pytest.mark.parametrize("key,value", [("n_head", 3), ("n_embd", 17), ("n_head", 0), ("n_layer", 0),
                                       ("n_layer", "1"), ("n_embd", None)])
def test_config_with_impossible_numbers(checkpoint, tmp_path, key, value):
  """Shape numbers no GPT-2 can have (n_embd not a multiple of n_head, zero, not an integer) are refused,
  naming the file."""
  folder = with_config(checkpoint, tmp_path, **{key: value})
  with pytest.raises(LoadError, match="config.json is not a GPT-2 config") as e:
    load_model(str(folder))
  one_sentence(e)

@pytest.mark.parametrize("path", ["/no/such/folder", "no/such/folder", "./no-such", "~/no-such"])
def test_folder_that_does_not_exist(cache, path):
  """A path that is no folder is not called an unknown model name: the message says the folder does not
  exist."""
  with pytest.raises(LoadError, match=f"The folder {path} does not exist: give the path of a folder") as e:
    load_model(path)
  one_sentence(e)

def test_demo_names_work_from_any_folder(checkpoint, tmp_path, monkeypatch):
  """demo-target and demo-draft name the pair shipped in demo/ from any working directory, and a folder of the
  same name there does not shadow them: ./demo-target is that folder."""
  monkeypatch.chdir(tmp_path)
  shutil.copytree(checkpoint, tmp_path / "demo-target")
  for name in ("demo-target", "demo-draft"):
    assert weights.checkpoint_dir(name) == weights.REPO / "demo" / name.removeprefix("demo-")
  assert weights.checkpoint_dir("./demo-target").resolve() == (tmp_path / "demo-target").resolve()

def test_folder_under_home(checkpoint, tmp_path, monkeypatch):
  """A folder given as ~/... is looked for in the home folder, as a shell would."""
  monkeypatch.setenv("HOME", str(tmp_path))
  shutil.copytree(checkpoint, tmp_path / "ckpt")
  assert weights.checkpoint_dir("~/ckpt") == tmp_path / "ckpt"

# --- the tokenizer, offline ---

TEXT = "Alan Turing theorized that computers would one day become"
TEXT_TOKENS = [36235, 39141, 18765, 1143, 326, 9061, 561, 530, 1110, 1716]
# tiktoken's cache names: the sha1 of each file's URL on OpenAI's server
TIKTOKEN_NAMES = {"vocab.bpe": "6d1cbeee0f20b3d9449abfede4726ed8212e3aee",
                  "encoder.json": "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6"}
needs_tokenizer_files = pytest.mark.skipif(
  not all((TOKENIZER_DIR / f).is_file() for f in TIKTOKEN_NAMES),
  reason=f"GPT-2's tokenizer files are not in {TOKENIZER_DIR} (see the project README)")

@pytest.fixture
def offline_tiktoken(tmp_path, closed_port, monkeypatch):
  """An empty TIKTOKEN_CACHE_DIR, tiktoken's in-process encodings forgotten, and every HTTP(S) request sent to
  a closed proxy."""
  monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
  monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
  monkeypatch.setattr(weights, "TOKENIZER_DIR", tmp_path / "no-shipped-files")  # tiktoken's route
  for v in ("HTTP_PROXY", "HTTPS_PROXY"):
    monkeypatch.setenv(v, f"http://127.0.0.1:{closed_port}")
  for v in ("ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY", "no_proxy"):
    monkeypatch.delenv(v, raising=False)
  return tmp_path / "tiktoken"

@needs_tokenizer_files
def test_tokenizer_from_folder(offline_tiktoken):
  """The real GPT-2 BPE, built from a folder with no network, gives the known tokens and decodes back."""
  enc = load_tokenizer(str(TOKENIZER_DIR))
  assert enc.encode(TEXT) == TEXT_TOKENS and enc.decode(TEXT_TOKENS) == TEXT and enc.n_vocab == 50257

@needs_tokenizer_files
def test_tokenizer_ships_with_the_repository(offline_tiktoken, monkeypatch):
  """By default the tokenizer comes from the two files shipped in demo/ (checked against tiktoken's sha256):
  no network (requests go to a closed port) and an empty tiktoken cache are no obstacle."""
  monkeypatch.setattr(weights, "TOKENIZER_DIR", TOKENIZER_DIR)
  enc = load_tokenizer()
  assert enc.encode(TEXT) == TEXT_TOKENS and enc.decode(TEXT_TOKENS) == TEXT and enc.n_vocab == 50257

@needs_tokenizer_files
def test_tokenizer_from_tiktoken_cache(offline_tiktoken):
  """tiktoken's own route, without the shipped files: the two files pre-placed in TIKTOKEN_CACHE_DIR under
  their URL-hash names, no network."""
  offline_tiktoken.mkdir()
  for f, name in TIKTOKEN_NAMES.items():
    shutil.copy(TOKENIZER_DIR / f, offline_tiktoken / name)
  enc = load_tokenizer()
  assert enc.encode(TEXT) == TEXT_TOKENS and enc.decode(TEXT_TOKENS) == TEXT

def test_tokenizer_folder_without_files(offline_tiktoken, tmp_path):
  """A folder lacking encoder.json and vocab.bpe is a LoadError naming the folder."""
  with pytest.raises(LoadError, match="from the folder") as e:
    load_tokenizer(str(tmp_path / "empty"))
  one_sentence(e)

def test_tokenizer_no_network_empty_cache(offline_tiktoken):
  """No shipped files, no network and nothing in tiktoken's cache is a LoadError saying where to get the two
  files."""
  with pytest.raises(LoadError, match="put encoder.json and vocab.bpe") as e:
    load_tokenizer()
  one_sentence(e)

# --- writing a checkpoint ---

def test_save_model_is_load_models_inverse(checkpoint, tmp_path):
  """save_model writes the Hub's layout: the tensors tests/tiny.py writes independently (names, shapes,
  float32, Conv1D weights (in, out), the same values), no KV cache, and a config.json that reads back; loading
  it gives the same logits."""
  model = load_model(str(checkpoint))
  before = logits(model, TOKENS)  # a run allocates the KV caches: state, not weights, so not saved
  folder = weights.save_model(model, tmp_path / "saved")
  assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
  hub = {k: v for k, v in hub_tensors(**SHAPE, seed=0, std=0.5).items() if not k.endswith(".attn.bias")}
  saved = {k: v.to(None).numpy() for k, v in safe_load(folder / "model.safetensors").items()}
  assert {k: (v.shape, v.dtype) for k, v in saved.items()} == {k: (v.shape, v.dtype) for k, v in hub.items()}
  for k, v in hub.items():
    np.testing.assert_array_equal(saved[k], v, err_msg=k)
  config = json.loads((folder / "config.json").read_text())
  assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
  assert weights.read_config(folder) == model.config
  np.testing.assert_array_equal(logits(load_model(str(folder)), TOKENS), before)

def test_save_model_writes_float32(checkpoint, tmp_path):
  """A float16 model is saved as float32, as the Hub's checkpoints are: its values, widened."""
  folder = weights.save_model(load_model(str(checkpoint), dtypes.float16), tmp_path / "saved")
  hub = hub_tensors(**SHAPE, seed=0, std=0.5)
  for k, v in safe_load(folder / "model.safetensors").items():
    np.testing.assert_array_equal(v.to(None).numpy(), hub[k].astype(np.float16).astype(np.float32), err_msg=k)
