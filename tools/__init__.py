"""The tools around the lesson: the command line, warming up and timing a round's parts, the benchmark, the paper's
experiment on the real pair (reproduce.py) and the GPU script. A first reading can skip this folder; it imports the
lesson, never the other way."""
