"""The engine: how the lesson runs fast (device layout, compiled calls, the download client). A first reading can
skip this folder; it imports neither the lesson at the root nor tools/."""
