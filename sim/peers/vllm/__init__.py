"""vLLM: its driver (run in the engine's venv), and what kvsim judges of vLLM alone."""
