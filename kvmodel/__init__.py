"""Executable reference models of kvsim: pure Python, the authority on semantics.

`kvmodel.store` is the NInfer growing-KV store contract (seed 000). It knows nothing of traces,
reports, arrays or GPUs.
"""
