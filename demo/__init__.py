"""The demo pair shipped here and the code that trained it; a first reading can skip this folder.

target/ and draft/ are the pair (the target q and the draft p, loaded as demo-target and demo-draft), beside
GPT-2's tokenizer files (encoder.json, vocab.bpe). train.py trained them, in PyTorch, on the prose that corpus.py
makes of Python's documentation: `python -m demo.train --help` from the repository's root; docs/demo.md is their
model card.
"""
