"""Writes vllm_hash_vectors.json: block hashes vLLM itself computes (its get_request_block_hasher over duck-typed
requests: tokens, multimodal items, a cache salt, prompt-embedding digests, lookahead tokens), for both of its
sha256 schemes and two NONE_HASH seeds. Run once with an engine venv's python (vLLM 0.33.0 here):

    .engines/vllm/bin/python tests/fuzz/data/make_vllm_hash_vectors.py   # scripts/install-engine vllm .engines/vllm

tests/fuzz/test_judge_fuzz.py compares sim/fuzz/hash_reference.py with these vectors (kvsim's venv has no vLLM).
"""

import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace

from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core import kv_cache_utils as ku


def request(tokens, mm, salt):
    feats = [SimpleNamespace(identifier=i, mm_position=SimpleNamespace(offset=o, length=n)) for i, o, n in mm]
    return SimpleNamespace(block_hashes=[], num_tokens=len(tokens), all_token_ids=tokens, mm_features=feats,
                           lora_request=None, cache_salt=salt, prompt_embeds=None)


def main() -> int:
    rng = random.Random(7)
    cases = []
    for k in range(40):
        algo = ("sha256", "sha256_cbor")[k % 2]
        seed = ("vllm-none-hash", "42")[(k // 2) % 2]
        hb = rng.choice((1, 2, 4))
        tokens = [rng.randrange(200000) for _ in range(hb * rng.randint(1, 5) + rng.randint(0, 2))]
        mm = sorted({(rng.choice(("img-a", "img-b")), rng.randrange(len(tokens)), rng.randint(1, 4))
                     for _ in range(rng.randint(0, 2))}, key=lambda x: x[1])
        salt = rng.choice((None, "tenant-7"))
        lookahead = rng.choice((0, 0, 1, 2))
        fn = get_hash_fn_by_name(algo)
        ku.NONE_HASH = ku.BlockHash(fn(seed))
        hasher = ku.get_request_block_hasher(hb, fn, lookahead)
        digests = hasher(request(tokens, mm, salt))
        cases.append({"algo": algo, "seed": seed, "hash_block": hb, "tokens": tokens, "mm": mm, "salt": salt,
                      "lookahead": lookahead, "digests": [d.hex() for d in digests]})
    out = Path(__file__).with_name("vllm_hash_vectors.json")
    out.write_text(json.dumps({"vllm": __import__("vllm").__version__, "cases": cases}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
