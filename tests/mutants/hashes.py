"""Seeded bugs of the block-hash recomputation for `kvsim selfcheck` (sim/peers/judges/block_hash.py; TokenSpeed's
prefix framing kvmodel/cache/prefix_hash.py), in the record format of `catalogue.py` (which concatenates them):
vLLM's sha256 / sha256_cbor keys, SGLang's wide-token framing, TokenSpeed's FNV-1a 64 and SHA-256 framings. Each is
killed by the `judge-hash` machine (sim/fuzz/hash_machine.py, against each engine's documented scheme in
sim/fuzz/hash_reference.py, itself checked against hashes vLLM computed: tests/fuzz/data/vllm_hash_vectors.json).
Plain data: no kvsim import here.
"""

MUTANTS = [
    dict(name="hash-vllm-seed-ignored", machine="judge-hash",
         bug="vLLM's NONE_HASH derived from the default seed whatever PYTHONHASHSEED the engine ran with: every root "
             "block of such an engine reads as a hash mismatch",
         file="sim/peers/judges/block_hash.py",
         old="        self.none_hash = vllm_none_hash(cbor, seed)",
         new="        self.none_hash = vllm_none_hash(cbor)"),
    dict(name="hash-cbor-head-off-by-one", machine="judge-hash",
         bug="off-by-one in canonical CBOR's immediate range: 23 is given a one-byte argument, so a token id or a "
             "length of 23 hashes differently from vLLM's sha256_cbor",
         file="sim/peers/judges/block_hash.py",
         old="    if n < 24:",
         new="    if n < 23:"),
    dict(name="hash-vllm-lookahead-dropped", machine="judge-hash",
         bug="vLLM's lookahead tokens left out of the block key: an engine hashing with num_hash_lookahead_tokens "
             "reads as mismatching",
         file="sim/peers/judges/block_hash.py",
         old="        if lookahead is not None:",
         new="        if False:"),
    dict(name="hash-vllm-mm-key-untagged", machine="judge-hash",
         bug="a multimodal extra key re-tagged without its \"mm\" tag: blocks holding an image read as mismatching",
         file="sim/peers/judges/block_hash.py",
         old="                    keys.append((\"mm\", key[0], key[1]))",
         new="                    keys.append((key[0], key[1]))"),
    dict(name="hash-vllm-salt-on-every-hash-block", machine="judge-hash",
         bug="a cache salt hashed into every hash block of a wide group's first block, not only the first hash block",
         file="sim/peers/judges/block_hash.py",
         old="            d = self._one(d, tokens[i:i + step], key if not first_only or i == 0 else None)",
         new="            d = self._one(d, tokens[i:i + step], key)"),
    dict(name="hash-vllm-int-value-little-endian", machine="judge-hash",
         bug="the 64-bit event value read from the digest little-endian: every vLLM integer block hash mismatches",
         file="sim/peers/judges/block_hash.py",
         old="            return value == int.from_bytes(digest, \"big\") & _M64",
         new="            return value == int.from_bytes(digest, \"little\") & _M64"),
    dict(name="hash-sglang-wide-page-untagged", machine="judge-hash",
         bug="SGLang's wide page (a token above 2**32 - 1) hashed without its 0xff tag",
         file="sim/peers/judges/block_hash.py",
         old="                h.update(b\"\\xff\")\n",
         new=""),
    dict(name="hash-fnv-count-u32", machine="judge-hash",
         bug="TokenSpeed's FNV-1a 64 framing with a 32-bit token count (the scalar path recognising a stream's "
             "scheme): its root blocks recompute under nothing",
         file="sim/peers/judges/block_hash.py",
         old="    data += len(tokens).to_bytes(8, \"little\")",
         new="    data += len(tokens).to_bytes(4, \"little\")"),
    dict(name="hash-tokenspeed-prior-length-unframed", machine="judge-hash",
         bug="TokenSpeed's SHA-256 prefix framing without the prior digest's length: every page key differs",
         file="kvmodel/cache/prefix_hash.py",
         old="    h.update(_u32(len(prior)))",
         new=""),
]
