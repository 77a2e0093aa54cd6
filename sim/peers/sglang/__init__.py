"""SGLang: its driver (run in the engine's venv), and what kvsim judges of SGLang alone."""
