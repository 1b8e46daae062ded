"""The README is a short front door, every relative link in it and in docs/ leads somewhere, every command in
them renders as code, and no placeholder is left in those pages or in the notebooks' prose.

Pure text: no tinygrad, no network, a few milliseconds. Links to http(s) and mailto are not followed (the
tests never touch the network); links to files are checked on disk, and #anchors against the headings of the
Markdown page they point to, slugged as GitHub slugs them.
"""
from __future__ import annotations
import json, re, unicodedata
from pathlib import Path
from urllib.parse import unquote
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_LINES, MAX_COLUMNS = 200, 110

# [text](target) and ![alt](target), with an optional "title"; the text may hold one level of brackets
INLINE_LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)')
REFERENCE_DEFINITION = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$')
HTML_LINK = re.compile(r'<(?:a|img)\s[^>]*?(?:href|src)="([^"]*)"', re.IGNORECASE)
EXTERNAL = ("http://", "https://", "mailto:")
# A placeholder left where a figure or a paragraph should be: an all-caps word alone on its line (CONTROL_FIGURES
# once stood in docs/tests.md where the controls' p-values belong), or a note to self anywhere in the prose
PLACEHOLDER_LINE = re.compile(r"[A-Z][A-Z0-9_]+")
PLACEHOLDER_WORD = re.compile(r"\b(?:TODO|TBD|FIXME)\b")
# A line that a reader would paste into a shell: environment settings, then a command these pages use
COMMAND = re.compile(r"(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?|pip3?|bash|git|sudo|apt-get|export|xcode-select)\s")

def columns(line: str) -> int:
  """The width an editor shows: combining marks (the hat of α̂, the tilde of x̃) take no column of their own."""
  return sum(not unicodedata.combining(ch) for ch in line)

def outside_code(text: str) -> list[str]:
  """The lines of a Markdown text outside its fenced code blocks."""
  lines, fence = [], None
  for line in text.splitlines():
    marker = re.match(r"\s{0,3}(```+|~~~+)", line)
    if marker and (fence is None or marker.group(1).startswith(fence)):
      fence = None if fence else marker.group(1)[:3]
    elif fence is None:
      lines.append(line)
  return lines

def prose_lines(text: str) -> list[str]:
  """The lines outside code blocks, with inline code spans blanked: a link written as code is not one."""
  return [re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line) for line in outside_code(text)]

def placeholders(text: str) -> list[str]:
  """The lines of a Markdown text that hold a placeholder. Code blocks are left out, and code spans too for the
  words, where TODO can be code; an all-caps word alone on its line counts in bold, brackets or backticks."""
  return [line.strip() for line, prose in zip(outside_code(text), prose_lines(text))
          if PLACEHOLDER_LINE.fullmatch(line.strip().strip("`*_<>{}[]")) or PLACEHOLDER_WORD.search(prose)]

def unfenced_commands(text: str, indented_ok: bool = False) -> list[str]:
  """The commands of a Markdown text that do not render as a fenced code block: a line of a paragraph (Markdown
  joins lines indented under a paragraph line into it: the README's test commands once read as one line of
  prose), a code span alone on its line, or with indented_ok False a line of an indented code block."""
  MarkdownIt = pytest.importorskip("markdown_it", reason="pip install -r requirements-dev.txt").MarkdownIt
  found = []
  for token in MarkdownIt("commonmark").parse(text):
    if token.type == "code_block" and not indented_ok:
      found += [line.strip() for line in token.content.splitlines() if COMMAND.match(line.strip())]
    elif token.type == "inline":
      for line in (line.strip() for line in token.content.splitlines()):
        if COMMAND.match(line) or ((span := re.fullmatch(r"`([^`]+)`", line)) and COMMAND.match(span.group(1))):
          found.append(line)
  return found

def markdown(path: Path) -> str:
  """A page's text, or a notebook's markdown cells (read from the .ipynb JSON; its code cells are code)."""
  if path.suffix != ".ipynb":
    return path.read_text(encoding="utf-8")
  cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
  # a cell's source is a string or a list of lines; "".join reads both
  return "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")

def slug(heading: str) -> str:
  """GitHub's anchor for a heading: its text without Markdown, lowercased, with punctuation dropped (letters,
  digits, marks, '_', '-' and spaces stay) and each space turned into a hyphen."""
  text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link's text, not its target
  text = re.sub(r"<[^>]+>", "", text).strip().lower()         # inline HTML
  kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
  return kept.replace(" ", "-")

def anchors(page: Path) -> set[str]:
  """Every anchor GitHub gives the page's headings; a repeated heading gets -1, -2, ... as GitHub numbers it.
  Code spans stay in a heading's text, as GitHub slugs them too."""
  seen: dict[str, int] = {}
  found = set()
  for line in outside_code(page.read_text(encoding="utf-8")):
    if not (heading := re.match(r"\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", line)):
      continue
    base = slug(heading.group(1))
    count = seen.get(base, 0)
    found.add(base if count == 0 else f"{base}-{count}")
    seen[base] = count + 1
  return found

def links(page: Path) -> list[str]:
  """Every link target written in the page's prose."""
  targets = []
  for line in prose_lines(page.read_text(encoding="utf-8")):
    targets += INLINE_LINK.findall(line) + HTML_LINK.findall(line)
    if (definition := REFERENCE_DEFINITION.match(line)):
      targets.append(definition.group(1))
  return targets

def broken_links(page: Path) -> list[str]:
  """The relative links of a page that lead nowhere: a missing file or folder, or an anchor no heading has."""
  broken = []
  for target in links(page):
    if not target or target.startswith(EXTERNAL):
      continue
    path, _, anchor = unquote(target).partition("#")
    destination = (page.parent / path).resolve() if path else page
    if not destination.exists():
      broken.append(f"{target}: no such file")
    elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
      broken.append(f"{target}: no heading in {destination.name} has that anchor")
  return broken

# ***** the rules themselves, on known cases, so that a pass below means something *****

@pytest.mark.parametrize("heading, anchor", [
  ("Try it with no download", "try-it-with-no-download"),
  ('What "exact" means here', "what-exact-means-here"),
  ("Tests: does it keep the target's distribution?", "tests-does-it-keep-the-targets-distribution"),
  ("Host work per call: DEV=NULL", "host-work-per-call-devnull"),
  ("Does it pay on your machine? `bench.py`", "does-it-pay-on-your-machine-benchpy"),
  ("top-k and top-p cost no sort", "top-k-and-top-p-cost-no-sort"),
  ("[The demo](docs/demo.md) pair", "the-demo-pair"),
  ("snake_case stays", "snake_case-stays"),
])
def test_slug_follows_github(heading: str, anchor: str):
  assert slug(heading) == anchor

def test_duplicate_headings_are_numbered(tmp_path: Path):
  page = tmp_path / "page.md"
  page.write_text("# Notes\n## Setup\n```\n## not a heading\n```\n## Setup\n## Setup\n", encoding="utf-8")
  assert anchors(page) == {"notes", "setup", "setup-1", "setup-2"}

def test_a_broken_link_is_reported(tmp_path: Path):
  (tmp_path / "other.md").write_text("# Present\n", encoding="utf-8")
  page = tmp_path / "page.md"
  page.write_text("[ok](other.md#present) [gone](missing.md) [bad anchor](other.md#absent) [self](#nowhere)\n"
                  "`[in code](missing.md)` [web](https://example.com/x.md)\n", encoding="utf-8")
  assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "other.md#absent", "#nowhere"]

def test_a_placeholder_is_found(tmp_path: Path):
  planted = "CONTROL_FIGURES\nThe figures are TBD.\n**RESULTS_2**\nTODO: measure on CL\nA FIXME left in prose.\n"
  ordinary = ("# Negative controls\n## FAQ\nOn the CPU, DEV=CPU, N = 20,000: p < 1e-14.\nCPU.\nK\n"
              "`TODO` is code here; a to-do list, todos.\n```\nRESULTS\n# TODO\n```\n")
  assert placeholders(planted + ordinary) == ["CONTROL_FIGURES", "The figures are TBD.", "**RESULTS_2**",
                                              "TODO: measure on CL", "A FIXME left in prose."]
  notebook = tmp_path / "n.ipynb"
  notebook.write_text(json.dumps({"cells": [
    {"cell_type": "markdown", "source": ["## Results\n", "FIGURES\n"]},
    {"cell_type": "code", "source": "# TODO: not prose\nBEAM\n"}]}), encoding="utf-8")
  assert placeholders(markdown(notebook)) == ["FIGURES"]

def test_an_unfenced_command_is_found():
  planted = ("Two tiers:\n    pip install -r requirements.txt\n    python -m pytest -m slow\n\n"
             "    DEV=CPU BEAM=0 python bench.py\n\n`sudo apt-get install -y clang`\n\n")
  ordinary = ("```bash\npython -m pytest\n```\n\nThe command `python -m pytest` runs them; python is 3.11.\n\n"
              "    a table of figures, not a command\n")
  assert unfenced_commands(planted + ordinary) == ["pip install -r requirements.txt", "python -m pytest -m slow",
                                                  "DEV=CPU BEAM=0 python bench.py", "`sudo apt-get install -y clang`"]
  assert unfenced_commands(planted, indented_ok=True) == ["pip install -r requirements.txt",
                                                          "python -m pytest -m slow", "`sudo apt-get install -y clang`"]

# ***** the repository's pages *****

@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
  assert broken_links(page) == [], f"{page.relative_to(ROOT)} has broken links"

@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_render_as_code(page: Path):
  """Every command a reader may paste sits in a fenced code block; the log, a dated record, may keep indented
  ones (they render as code too)."""
  assert unfenced_commands(page.read_text(encoding="utf-8"), indented_ok=page.name == "log.md") == [], \
    f"{page.relative_to(ROOT)}: commands outside a fenced code block"

@pytest.mark.parametrize("page", PAGES + NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_placeholder_is_left(page: Path):
  assert placeholders(markdown(page)) == [], f"{page.relative_to(ROOT)} holds placeholders"

def test_every_docs_page_is_linked_from_the_readme():
  linked = {(README.parent / unquote(t).partition("#")[0]).resolve() for t in links(README)}
  assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []

def test_readme_is_short():
  lines = README.read_text(encoding="utf-8").splitlines()
  assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; the depth belongs in docs/"

def test_readme_lines_fit():
  wide = [(n, columns(line)) for n, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1)
          if columns(line) > MAX_COLUMNS]
  assert wide == [], f"README.md lines wider than {MAX_COLUMNS} columns (line, width): {wide}"

DOC_LINES, DOC_COLUMNS = 250, 120  # a docs page; the log, which keeps history, is exempt

@pytest.mark.parametrize("page", [p for p in PAGES[1:] if p.name != "log.md"], ids=lambda p: p.name)
def test_a_docs_page_fits(page: Path):
  lines = page.read_text(encoding="utf-8").splitlines()
  wide = [(n, columns(line)) for n, line in enumerate(lines, 1) if columns(line) > DOC_COLUMNS]
  assert len(lines) <= DOC_LINES and wide == [], f"{page.name}: {len(lines)} lines; wider than {DOC_COLUMNS}: {wide}"
