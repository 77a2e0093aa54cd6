"""One submitted request as the cachetrace/1 contract keeps it. Prefix keys are the SHA-256 chain of
``kvmodel.cache.prefix_hash`` over the request's tokens (prompt, then the tokens its results produced), computed a
page at a time as the tokens become known -- a whole prompt framed and hashed in one pass.
"""

from __future__ import annotations

from kvsim.kvmodel.cache.prefix_hash import chain_digests, page_digest, token_bytes

__all__ = ["RequestState"]


class RequestState:
    """What the contract knows of one submitted request: its prompt and the tokens its results produced, its
    prefix keys (computed as its tokens become known), how far it computed, its rows and (retracted) its image."""


    __slots__ = ("rid", "tokens", "generated", "digests", "computed", "rows", "seen", "hit", "prefill", "framed",
                 "image")

    def __init__(self, rid: str, tokens) -> None:
        self.rid = rid
        self.tokens = tokens
        self.generated: list[int] = []
        self.digests: list[bytes] = []
        self.computed = 0
        self.rows: dict[str, list[int]] = {}
        self.seen = False
        self.hit = 0
        self.prefill = len(tokens)
        self.framed: bytes | None = None
        self.image: dict[str, set[int]] = {}  # a retracted request's pages: its rows then, and what restores gave it

    def token_slice(self, a: int, b: int):
        n = len(self.tokens)
        if b <= n:
            return self.tokens[a:b]
        head = list(self.tokens[a:n]) if a < n else []
        return head + self.generated[max(a - n, 0):b - n]

    def digest(self, page: int, p: int) -> bytes | None:
        """The prefix key of page ``page`` (None while its tokens are not all known)."""
        d = self.digests
        if len(d) > page:
            return d[page]
        whole = len(self.tokens) // p
        if page < whole:  # prompt pages: frame the prompt once, hash every whole page in one pass
            if self.framed is None:
                self.framed = token_bytes(self.tokens)
            start = len(d)
            d.extend(chain_digests(d[-1] if d else b"", memoryview(self.framed)[start * 4 * p:], p, whole - start))
            return d[page]
        while len(d) <= page:
            i = len(d)
            if (i + 1) * p > len(self.tokens) + len(self.generated):
                return None
            d.append(page_digest(d[-1] if d else b"", self.token_slice(i * p, (i + 1) * p)))
        return d[page]
