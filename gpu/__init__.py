"""The physical implementation: array backend, codecs, paged planes, KV append, paged attention, oracle.

Knows nothing of `kvmodel`: like a real kernel library it receives page ids, block tables and content.

Modules (one job each):

* ``backend`` - CuPy when a CUDA device is usable, else NumPy (``KVSIM_BACKEND`` overrides);
* ``formats``, ``hadamard``, ``codecs`` - bit-exact persistent codecs of the five storage profiles and
  their plane schema (``PLANE_SCHEMA``);
* ``planes`` - plane tensors in the closed orders, ``PagedKVLayerView`` / ``PagedKVBatchLayerView``,
  ``PagedKVPool`` (planes of every layer + the execution table matrix);
* ``append``, ``transfer`` - KV append through tables; page copies and packed Host transfers;
* ``attention`` (+ ``decode_tile``) - the paged consumer; ``oracle``, ``accuracy`` - FP64 oracle and
  tolerance tables;
* ``content``, ``readback`` - content from 64-bit keys and bit-exact row checks for lockstep drivers;
* ``cuda_codec_source``, ``cuda_source``, ``cuda_kernels``, ``splitkv`` - the device path;
* ``bench`` (``python -m gpu.bench``), ``devcheck`` (``python -m gpu.devcheck``).
"""
