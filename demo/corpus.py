"""The corpus the demo pair was trained on: Python's documentation, its reStructuredText sources turned into
prose, split by file into training and held-out text, as GPT-2's tokens (corpus). demo/train.py trains on it.

The sources are the documentation's, version 3.11.2 as Debian's python3.11-doc ships them (DOCS; a CPython
checkout's Doc/ works too), turned into prose (rst_text): roles and links to the text Sphinx shows, API
directives to their signature and description, notes and version notes in Sphinx's words, each paragraph on one
line; code, tables and the index left out. The trees that go in are TREES (the tutorial, the references, the
HOWTOs, the FAQ, ...; not the changelogs or the C API), and about one file in 10 is held out whole (held_out,
DOCS_HELD_OUT). docs/demo.md ("The data") says what comes out; tests/test_train.py pins it to the character.
"""
from __future__ import annotations
import functools, pathlib, re, zlib
import numpy as np

# --- the sources, and which of them go in ---

DOCS = pathlib.Path("/usr/share/doc/python3.11/html/_sources")  # where Debian's python3.11-doc puts them
DOCS_VERSION = "3.11.2"  # the documentation's version there (the package python3.11-doc 3.11.2-6+deb12u9)
INSTALL = ("install Python's documentation sources with `apt-get install -y python3.11-doc`, or pass a CPython "
           "checkout's Doc/ folder with --docs")
# the trees that go in: the prose about Python (the tutorial, the language and library references, the HOWTOs,
# the FAQ, the glossary, setup and packaging); left out: whatsnew (changelogs: lists of changes, contributors'
# names and issue numbers), c-api and extending (CPython's C API), distutils and install (the legacy distutils,
# removed in 3.12), and the pages about the documentation itself (about, bugs, contents, copyright, license)
TREES = ("tutorial/", "reference/", "library/", "howto/", "faq/", "glossary", "using/", "installing/",
         "distributing/")
HELD_OUT = 10   # a file is held out when the CRC-32 of its name (library/os) is divisible by this: see held_out
MIN_COUNT = 3   # a token may be emitted when the training files use it at least this many times

# --- the documentation's reStructuredText, as prose ---

SIGNATURE = {"function": "", "method": "", "classmethod": "classmethod ", "staticmethod": "static ",
             "coroutinefunction": "coroutine ", "coroutinemethod": "coroutine ", "awaitablefunction": "awaitable ",
             "abstractmethod": "abstractmethod ", "class": "class ", "exception": "exception ", "decorator": "@",
             "decoratormethod": "@", "attribute": "", "data": "", "describe": "", "object": "", "opcode": "",
             "cmdoption": "", "option": "", "envvar": "", "pdbcommand": "", "2to3fixer": "", "monitoring-event": ""}
ADMONITION = {"note": "Note", "warning": "Warning", "important": "Important", "caution": "Caution", "tip": "Tip",
              "hint": "Hint", "attention": "Attention", "danger": "Danger", "error": "Error", "seealso": "See also",
              "impl-detail": "CPython implementation detail"}
VERSIONED = {"versionadded": "New in version {}", "versionchanged": "Changed in version {}",
             "deprecated": "Deprecated since version {}",
             "deprecated-removed": "Deprecated since version {}, will be removed in version {}"}
DROPPED = {"code-block", "sourcecode", "code", "doctest", "testcode", "testoutput", "testsetup", "testcleanup",
           "productionlist", "parsed-literal", "literalinclude", "include", "highlight", "index", "toctree", "module",
           "currentmodule", "moduleauthor", "sectionauthor", "tabularcolumns", "image", "figure", "contents",
           "program", "miscnews", "limited-api-list", "math", "raw", "list-table", "csv-table", "table"}

DIRECTIVE = re.compile(r"\.\. ([\w:-]+)::(?: +(.*))?$")
OPTION = re.compile(r":[\w-]+:(?: |$)")
UNDERLINE = re.compile(r"([=\-~^*#\"'`+.:_<>])\1+$")
ITEM = re.compile(r"(?:[*+-]|#\.|\d+\.|\(\w\)) +(?=\S)")
TABLE = re.compile(r"\+[-=+]+\+$|=+(?: +=+)+$")

def margin(line: str) -> int:
  return len(line) - len(line.lstrip(" "))

def block(lines: list[str], i: int) -> tuple[list[str], int]:
  """The indented block that starts at line i (lines blank or indented, to the first line that is not), its
  common margin removed, and the index of the line after it."""
  j = i
  while j < len(lines) and (not lines[j].strip() or margin(lines[j]) > 0):
    j += 1
  body = lines[i:j]
  cut = min((margin(l) for l in body if l.strip()), default=0)
  return [l[cut:] for l in body], j

def role(name: str, text: str, labels: dict[str, str]) -> str:
  """What Sphinx shows for :name:`text`: the title of an explicit target (:ref:`the loop <for>`), a label's
  section title, PEP 8 for :pep:`8`, the last part of a ~dotted name, and () after a function's name."""
  kind = name.split(":")[-1]
  text = text.lstrip("!")
  titled = re.fullmatch(r"(.*?)\s*<([^<>]*)>", text, re.S)
  if titled and titled.group(1):
    return titled.group(1)
  if kind == "ref":
    return labels.get(text.lower(), text.replace("-", " "))
  if kind == "doc":
    return text.rsplit("/", 1)[-1].replace("-", " ")
  if kind in ("pep", "rfc"):
    return f"{kind.upper()} {text.split('#')[0]}"
  if kind in ("issue", "gh"):
    return f"{'bpo' if kind == 'issue' else 'gh'}-{text}"
  if kind == "samp":
    return re.sub(r"\{([^}]*)\}", r"\1", text)
  if kind == "abbr":
    return re.sub(r"\s*\(.*\)$", "", text, flags=re.S)
  if text.startswith("~"):
    text = text[1:].split(".")[-1]
  if kind in ("func", "meth") and not text.endswith(")"):
    text += "()"
  return text

def inline(text: str, labels: dict[str, str], subs: dict[str, str]) -> str:
  """One paragraph's inline markup to its text: literals, roles, links and substitutions to what they show,
  emphasis and footnote references gone, escapes resolved, runs of spaces one space."""
  kept = []
  def keep(s: str) -> str:
    kept.append(s)
    return f"\x00{len(kept) - 1}\x00"
  text = re.sub(r"``(.+?)``(?!`)", lambda m: keep(m.group(1)), text)
  text = re.sub(r"(?<![\w`]):((?:[\w-]+:)?[\w-]+):`(.+?)`(?!`)", lambda m: keep(role(m.group(1), m.group(2), labels)),
                text)
  text = re.sub(r"\|([^|\s](?:[^|]*[^|\s])?)\|(?:__?)?", lambda m: keep(inline(subs[m.group(1)], labels, {}))
                if m.group(1) in subs else m.group(), text)
  text = re.sub(r"`([^`<]*?)\s*<[^<>`]*>`__?", lambda m: keep(m.group(1)), text)
  text = re.sub(r"`([^`]+)`(?:__?)?", lambda m: keep(m.group(1)), text)
  text = re.sub(r"(?<![\w`])([A-Za-z][\w-]*[A-Za-z0-9])__?(?=[\s.,;:!?)]|$)", r"\1", text)  # a reference: name_
  text = re.sub(r" ?\[(?:#[\w-]*|\d+|\*)\]_", "", text)
  text = re.sub(r"\*\*(\S(?:.*?\S)?)\*\*", r"\1", text)
  text = re.sub(r"(?<![\w*\\])\*(?=[^\s*])(.+?)(?<=[^\s\\])\*(?![\w*])", r"\1", text)
  text = re.sub(r"\\(.)", lambda m: "" if m.group(1) == " " else m.group(1), text.replace("\\ ", ""))
  text = re.sub(r"\x00(\d+)\x00", lambda m: kept[int(m.group(1))], text)
  text = re.sub(r"\x00(\d+)\x00", lambda m: kept[int(m.group(1))], text)  # substitutions hold literals
  return re.sub(r"\s+", " ", text).strip()

# Each construct of reStructuredText is read by its own function: given the lines and the index i of a line that
# is not blank, it returns None when the construct does not start there, else the construct's paragraphs of prose
# and the index of the line after it. rst_paragraphs tries them in the order of READERS, then a list item, then a
# paragraph.
Found = tuple[list[str], int] | None  # what a reader returns: the construct's paragraphs and the line after it

def block_quote(lines: list[str], i: int, labels: dict[str, str], subs: dict[str, str]) -> Found:
  """An indented block: its own paragraphs."""
  if not margin(lines[i]):
    return None
  body, i = block(lines, i)
  return rst_paragraphs(body, labels, subs), i

def api(name: str) -> bool:
  """Whether a directive describes an API, as its signature and then its description (c:function, c:type,
  c:macro and the like too)."""
  return name.split(":")[-1] in SIGNATURE or name.startswith("c:")

def signatures(arg: str, body: list[str]) -> tuple[list[str], list[str]]:
  """An API directive's signatures: its argument and the lines right after it, to a blank line or an option (a
  backslash at a line's end continues the signature); and the rest of its body."""
  found, k = [arg], 0
  while k < len(body) and body[k].strip() and not OPTION.match(body[k].strip()):
    found.append(body[k].strip())
    k += 1
  for j in range(len(found) - 1, 0, -1):
    if found[j - 1].endswith("\\"):
      found[j - 1] = found[j - 1][:-1].rstrip() + " " + found.pop(j)
  return found, body[k:]

def version_note(name: str, arg: str, paras: list[str], labels: dict[str, str], subs: dict[str, str]) -> list[str]:
  """A version note (versionadded and the like) in Sphinx's words: "Changed in version 3.4: " before the note's
  text (from the directive's line, after the version, or its body), or "New in version 3.2." alone."""
  version, _, rest = arg.partition(" ")  # the version, then the note's text if it starts on this line
  if name == "deprecated-removed":  # two versions: deprecated in, removed in
    head, rest = VERSIONED[name].format(*arg.split()[:2]), ""
  else:
    head = VERSIONED[name].format(version)
  paras = ([inline(rest, labels, subs)] if rest else []) + paras
  return [f"{head}: {paras[0]}" if paras else f"{head}."] + paras[1:]

def audit_event(arg: str) -> str:
  """What Sphinx shows for an audit-event with no body: "Raises an auditing event spam.eggs with arguments a, b."."""
  event, *args = arg.split()
  args = ", ".join(a for a in (args[0] if args else "").split(",") if a)
  return f"Raises an auditing event {event} with " + (f"arguments {args}." if args else "no arguments.")

def shown(name: str, arg: str, sigs: list[str], paras: list[str], labels: dict[str, str],
          subs: dict[str, str]) -> list[str]:
  """What Sphinx shows for a directive that is not DROPPED, given its argument, its signatures and its body's
  paragraphs: an API's signatures then its description, a version note or an admonition in Sphinx's words, the
  availability, an audit event; the footnotes' heading left out; any other (topic, sidebar, glossary, only and
  the like) its argument and its paragraphs."""
  text = lambda s: inline(s, labels, subs)
  if api(name):
    return [SIGNATURE.get(name.split(":")[-1], "") + s.replace("\\\\", "\\") for s in sigs if s] + paras
  if name in VERSIONED:
    return version_note(name, arg, paras, labels, subs)
  if name in ADMONITION:
    paras = ([text(arg)] if arg else []) + paras
    return [f"{ADMONITION[name]}: {paras[0]}"] + paras[1:] if paras else []
  if name == "availability":
    return [f"Availability: {text(arg)}"]
  if name == "audit-event":
    return paras or [audit_event(arg)]
  if name == "rubric" and arg == "Footnotes":  # the footnotes are left out: so is their heading
    return []
  return ([text(arg)] if arg else []) + paras

def directive(lines: list[str], i: int, labels: dict[str, str], subs: dict[str, str]) -> Found:
  """A directive (.. name:: argument), its options and its indented body: what Sphinx shows for it (shown), or
  nothing when it is DROPPED."""
  d = DIRECTIVE.match(lines[i])
  if not d:
    return None
  name, arg = d.group(1), (d.group(2) or "").strip()
  body, i = block(lines, i + 1)
  if name in DROPPED:
    return [], i
  sigs, body = signatures(arg, body) if api(name) else ([arg], body)
  while body and OPTION.match(body[0].strip()):
    body = body[1:]
  return shown(name, arg, sigs, rst_paragraphs(body, labels, subs), labels, subs), i

def comment(lines: list[str], i: int, labels: dict[str, str], subs: dict[str, str]) -> Found:
  """A comment, a target or a substitution's definition (.. and its indented block): left out."""
  if not (lines[i] == ".." or lines[i].startswith(".. ")):
    return None
  return [], block(lines, i + 1)[1]

def title(lines: list[str], i: int, labels: dict[str, str], subs: dict[str, str]) -> Found:
  """A section title, between an overline and an underline, or above an underline at least as long as it."""
  n, stripped = len(lines), lines[i].strip()
  if UNDERLINE.match(stripped) and i + 2 < n and UNDERLINE.match(lines[i + 2].strip()) and lines[i + 1].strip():
    return [inline(lines[i + 1], labels, subs)], i + 3
  if i + 1 < n and UNDERLINE.match(lines[i + 1].strip()) and len(lines[i + 1].strip()) >= len(stripped) >= 1 \
     and not TABLE.match(stripped):
    return [inline(stripped, labels, subs)], i + 2
  return None

def transition(lines: list[str], i: int, labels: dict[str, str], subs: dict[str, str]) -> Found:
  """A transition (a horizontal rule: a line of 4 or more punctuation marks alone): left out."""
  stripped = lines[i].strip()
  if UNDERLINE.match(stripped) and len(stripped) >= 4 and (i + 1 == len(lines) or not lines[i + 1].strip()):
    return [], i + 1
  return None

def table(lines: list[str], i: int, labels: dict[str, str], subs: dict[str, str]) -> Found:
  """A table: left out, a grid table (+---+) to its last row, a simple one (=== ===) to its last rule."""
  n, stripped = len(lines), lines[i].strip()
  if not TABLE.match(stripped):
    return None
  grid = stripped.startswith("+")
  i += 1
  while i < n and (lines[i].strip().startswith(("+", "|")) if grid else
                   not (TABLE.match(lines[i].strip()) and (i + 1 == n or not lines[i + 1].strip()))):
    i += 1
  return [], i + (not grid)

def session(lines: list[str], i: int, labels: dict[str, str], subs: dict[str, str]) -> Found:
  """An interactive session (>>>) or a line block (| ): left out, to the next blank line."""
  stripped = lines[i].strip()
  if not (stripped.startswith((">>>", "| ")) or stripped == "|"):
    return None
  while i < len(lines) and lines[i].strip():
    i += 1
  return [], i

READERS = (block_quote, directive, comment, title, transition, table, session)

def list_item(lines: list[str], i: int, number: int, labels: dict[str, str],
              subs: dict[str, str]) -> tuple[list[str], int]:
  """A list item (*, +, -, 1., (a), or #., which is numbered `number`): its marker before its first paragraph
  ("*" for the bullets)."""
  item = ITEM.match(lines[i])
  body, end = block(lines, i + 1)
  paras = rst_paragraphs([lines[i][len(item.group()):]] + body, labels, subs)
  marker = item.group().strip()
  marker = "*" if marker in "*+-" else f"{number}." if marker == "#." else marker
  return ([f"{marker} {paras[0]}"] + paras[1:] if paras else []), end

def past_literal_block(lines: list[str], i: int) -> int:
  """The index of the line after the literal block that the blank lines from line i lead to; i if none does."""
  j = i
  while j < len(lines) and not lines[j].strip():
    j += 1
  return block(lines, j)[1] if j < len(lines) and margin(lines[j]) else i

def paragraph(lines: list[str], i: int, labels: dict[str, str], subs: dict[str, str]) -> tuple[list[str], int]:
  """A paragraph, its lines joined into one. One that ends in "::" is followed by a literal block, left out ("For
  example::" keeps "For example:", "Done ::" keeps "Done"); one followed by an indented block is a definition
  list's term, and the block its definition. A field list's name (":param x: ...") loses its colons."""
  n, para = len(lines), [lines[i].strip()]
  i += 1
  while i < n and lines[i].strip() and not margin(lines[i]) and not DIRECTIVE.match(lines[i]):
    para.append(lines[i].strip())
    i += 1
  joined = " ".join(para)
  literal = joined.endswith("::")
  if literal:
    joined = joined[:-2].rstrip() if re.search(r"(^|\s)::$", joined) else joined[:-1]
  joined = re.sub(r"^:([\w ]+): ", r"\1: ", joined)  # a field list's name
  out = [inline(joined, labels, subs)] if joined else []
  if i < n and lines[i].strip() and margin(lines[i]):  # a definition list's term: its definition follows
    body, i = block(lines, i)
    return out + ([] if literal else rst_paragraphs(body, labels, subs)), i
  return out, past_literal_block(lines, i) if literal else i

def rst_paragraphs(lines: list[str], labels: dict[str, str], subs: dict[str, str]) -> list[str]:
  """reStructuredText to paragraphs of prose, each on one line (see rst_text): each construct that starts on a
  line that is not blank read by the first of READERS that finds one there, else as a list item or a paragraph."""
  out, i = [], 0
  number = 0  # the number of the last "#." item of the list being read, if any
  while i < len(lines):
    if not lines[i].strip():
      i += 1
      continue
    if not lines[i].startswith("#. "):
      number = 0
    for read in READERS:
      if found := read(lines, i, labels, subs):
        break
    else:  # no reader found its construct here
      item = ITEM.match(lines[i])
      if item:
        number += item.group().strip() == "#."
      found = list_item(lines, i, number, labels, subs) if item else paragraph(lines, i, labels, subs)
    paras, i = found
    out += paras
  return out

def rst_text(source: str, labels: dict[str, str]) -> str:
  """A reStructuredText file of the documentation as prose: each paragraph, list item, section title and
  signature on one line, with no blank lines and no margins. Roles and links become the text Sphinx shows
  (role), admonitions and version notes the words Sphinx puts before them ("Note: ", "New in version 3.2: "),
  and API directives their signature line and then their description. Code (literal blocks after "::", code
  directives, interactive sessions, grammar), tables, comments and the index are left out."""
  lines = source.expandtabs(8).replace("\r", "").split("\n")
  subs = {"version": DOCS_VERSION.rsplit(".", 1)[0], "release": DOCS_VERSION, "nbsp": " "}
  for m in re.finditer(r"^\.\. \|([^|]+)\| replace:: (.*)$", source, re.M):
    subs[m.group(1)] = m.group(2)
  return "\n".join(p for p in rst_paragraphs([l.rstrip() for l in lines], labels, subs) if p)

def section_labels(sources) -> dict[str, str]:
  """Every `.. _label:` that stands right above a section title, to that title (what :ref:`label` shows)."""
  labels = {}
  for source in sources:
    lines = source.expandtabs(8).split("\n")
    for i, line in enumerate(lines):
      m = re.match(r"\.\. _([^:]+):\s*$", line)
      if not m:
        continue
      j = i + 1
      while j < len(lines) and (not lines[j].strip() or re.match(r"\.\. _[^:]+:\s*$", lines[j])):
        j += 1
      if j + 1 < len(lines) and UNDERLINE.match(lines[j].strip()) and j + 2 < len(lines):
        j += 1
      if j + 1 < len(lines) and lines[j].strip() and UNDERLINE.match(lines[j + 1].strip()):
        labels[m.group(1).lower()] = inline(lines[j].strip(), {}, {})
  return labels

def doc_files(docs: pathlib.Path = DOCS) -> dict[str, pathlib.Path]:
  """Every reStructuredText file under docs (Debian's _sources/**/*.rst.txt or a CPython checkout's
  Doc/**/*.rst), by its name: the path without the suffix (library/os). Exits with what to install when there
  are none."""
  files = {str(p.relative_to(docs)).removesuffix(".txt").removesuffix(".rst"): p
           for p in sorted(pathlib.Path(docs).rglob("*.rst*")) if p.name.endswith((".rst", ".rst.txt"))}
  if not files:
    raise SystemExit(f"no reStructuredText files in {docs}: {INSTALL}")
  return files

def held_out(name: str) -> bool:
  """Whether a file (by name: library/os) is held out for validation: the CRC-32 of its name is divisible by
  HELD_OUT. About one file in 10, whole; the same file is held out whatever other files the folder holds (a
  CPython checkout's Doc/ has more), and in 3.11.2's trees these 32: DOCS_HELD_OUT."""
  return zlib.crc32(name.encode()) % HELD_OUT == 0

DOCS_HELD_OUT = ["distributing/index", "howto/regex", "library/_thread", "library/aifc", "library/argparse",
                 "library/asyncio-api-index", "library/collections", "library/csv", "library/dialog",
                 "library/difflib", "library/email.errors", "library/email.message", "library/email.utils",
                 "library/fileinput", "library/hashlib", "library/html.entities", "library/operator",
                 "library/optparse", "library/pickle", "library/pkgutil", "library/pyclbr", "library/python",
                 "library/sched", "library/select", "library/shlex", "library/tarfile", "library/threading",
                 "library/xmlrpc", "reference/compound_stmts", "tutorial/inputoutput", "tutorial/modules",
                 "using/editors"]

@functools.lru_cache(maxsize=2)
def docs_split(docs: pathlib.Path = DOCS) -> tuple[dict[str, str], dict[str, str]]:
  """The files of TREES as prose (rst_text), sorted by name: (training files, held-out files), each a dict from
  name to text. :ref:`label` shows the section title that the label stands above in any file of docs."""
  files = doc_files(docs)
  sources = {name: path.read_text(encoding="utf-8") for name, path in files.items()}
  labels = section_labels(sources.values())
  texts = {name: rst_text(source, labels) for name, source in sources.items() if name.startswith(TREES)}
  return ({n: t for n, t in texts.items() if not held_out(n)}, {n: t for n, t in texts.items() if held_out(n)})

def corpus(enc, docs: pathlib.Path = DOCS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The training and held-out token streams (the files of docs_split, joined by a line break) and the sorted
  token ids that the pair may emit: those the training files use at least MIN_COUNT times; every other token is
  the pair's OTHER (see demo/train.py's emit_index)."""
  train, val = (list(texts.values()) for texts in docs_split(pathlib.Path(docs)))
  train_ids, val_ids = (np.array(enc.encode("\n".join(t)), dtype=np.int32) for t in (train, val))
  ids, counts = np.unique(train_ids, return_counts=True)
  return train_ids, val_ids, ids[counts >= MIN_COUNT]
