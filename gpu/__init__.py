"""The physical implementation: array backend, codecs, paged planes, KV append, paged attention, oracle.

Knows nothing of `kvmodel`: like a real kernel library it receives page ids, block tables and content.
"""
