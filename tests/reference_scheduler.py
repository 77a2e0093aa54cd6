"""An independent reference of `kvsim simulate`'s scheduler, written from the README's policy description only.

Plain Python and the standard library: it imports nothing of kvsim and shares no code or data structure with
`sim/simulate/` (no checkpoints, no store model, no prefix index). It keeps a block-level cache instead:

* a prompt's full 64-token pages are keyed by their content (the chain of the workload's block ids up to the
  page, and the page's place in its 512-token block); a partial last page is cached too (it holds memory)
  but never matches;
* cached pages live in one least-recently-used order; a page is used when a prefill caches it and when an
  admission reuses it; among pages used at the same moment the deeper ones go first;
* pages of running requests are pinned (the prefix a request reuses, from its admission; its own prompt
  pages while it decodes) and never evicted;
* admission is FIFO with one prefill at a time: the head reuses the longest cached prefix of its full pages
  (at most floor((prompt - 1)/64) pages), needs ceil((prompt + output)/64) - reused + 1 pages, evicts
  least-recently-used unpinned pages until they are free, waits for running requests when that is not
  enough, and is rejected when nothing runs and even an empty cache cannot hold it;
* virtual time: one iteration = base + prefill tokens · per_token + decoding requests · per_lane; a prefill
  advances by up to `chunk` tokens per iteration, every decoding request by one token.

`run(rows, capacity)` returns the reused and prompt tokens, the hit ratio and request counts.
"""

from __future__ import annotations

import heapq
import json

PAGE = 64
PAGES_PER_BLOCK = 8


def read_mooncake(path: str, limit: int | None = None) -> list[tuple[float, int, int, list[int]]]:
    """(arrival seconds, prompt tokens, output tokens, block ids) per row, in file order."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if limit is not None and len(rows) >= limit:
                break
            if line.strip():
                d = json.loads(line)
                rows.append((d["timestamp"] / 1000.0, d["input_length"], d["output_length"], d["hash_ids"]))
    return rows


class ReferenceScheduler:
    def __init__(self, capacity: int, concurrency: int = 256, max_context: int = 131072, chunk: int = 8192,
                 base: float = 0.008, per_token: float = 2.0e-5, per_lane: float = 1.0e-4) -> None:
        self.capacity, self.concurrency, self.max_context, self.chunk = capacity, concurrency, max_context, chunk
        self.base, self.per_token, self.per_lane = base, per_token, per_lane
        self.ids: dict[tuple, int] = {}  # (previous page key, block id, place in block) -> page key
        self.cached: dict = {}  # page key -> [pins, stamp]
        self.heap: list = []  # (stamp, page key) of unpinned cached pages; stale entries skipped
        self.clock = 0  # use stamps
        self.private = 0  # pages running requests hold privately

    def keys(self, prompt: int, blocks: list[int]) -> list[int]:
        out, prev = [], -1
        for j in range(prompt // PAGE):
            t = (prev, blocks[j // PAGES_PER_BLOCK], j % PAGES_PER_BLOCK)
            k = self.ids.get(t)
            if k is None:
                k = self.ids[t] = len(self.ids)
            out.append(k)
            prev = k
        return out

    def free(self) -> int:
        return self.capacity - len(self.cached) - self.private

    def use(self, keys: list) -> None:
        """The pages were used now (deeper pages get older stamps: they go first)."""
        n = len(keys)
        for i, k in enumerate(keys):
            e = self.cached[k]
            e[1] = self.clock + n - i
            if e[0] == 0:
                heapq.heappush(self.heap, (e[1], k))
        self.clock += n + 1

    def pin(self, keys: list) -> None:
        for k in keys:
            self.cached[k][0] += 1

    def unpin(self, keys: list) -> None:
        for k in keys:
            e = self.cached[k]
            e[0] -= 1
            if e[0] == 0:
                heapq.heappush(self.heap, (e[1], k))

    def evict_until(self, need: int) -> bool:
        heap, cached = self.heap, self.cached
        while self.free() < need and heap:
            stamp, k = heapq.heappop(heap)
            e = cached.get(k)
            if e is not None and e[0] == 0 and e[1] == stamp:
                del cached[k]
        return self.free() >= need

    def run(self, rows) -> dict:
        S, C = self.max_context, self.concurrency
        reused = prompt_tokens = served = rejected = 0
        queue: list = []
        head = 0
        nxt = 0
        now = 0.0
        it = 0
        prefill = None  # [rid, frontier, end, output, keys, reused pages]
        lanes: list = []  # heap of (finishing iteration, rid, private pages, pinned keys)
        blocked = False
        while True:
            while nxt < len(rows) and rows[nxt][0] <= now:
                arrival, n, o, blocks = rows[nxt]
                if n < 1 or n > S:
                    rejected += 1
                else:
                    queue.append((nxt, n, min(o, S - n), self.keys(n, blocks)))
                nxt += 1
            if prefill is None and head < len(queue) and len(lanes) + 2 <= C and not blocked:
                rid, n, o, keys = queue[head]
                m = 0
                while m < len(keys) and keys[m] in self.cached:
                    m += 1
                m = min(m, (n - 1) // PAGE)
                ent = -(-(n + o) // PAGE)
                admitted = False
                while True:
                    need = ent - m + 1
                    self.pin(keys[:m])
                    if self.evict_until(need):
                        admitted = True
                        break
                    self.unpin(keys[:m])
                    if prefill is not None or lanes:
                        blocked = True
                        break
                    if m == 0:
                        rejected += 1
                        head += 1
                        break
                    m = 0
                if admitted:
                    self.use(keys[:m])
                    self.private += ent - m
                    reused += m * PAGE
                    prompt_tokens += n
                    prefill = [rid, m * PAGE, n, o, keys, m]
                    head += 1
            if prefill is None and not lanes:
                if head < len(queue):
                    continue
                if nxt >= len(rows):
                    break
                now = max(now, rows[nxt][0])
                continue
            chunk = min(self.chunk, prefill[2] - prefill[1]) if prefill is not None else 0
            now += self.base + chunk * self.per_token + len(lanes) * self.per_lane
            it += 1
            while lanes and lanes[0][0] == it:
                _, _, own, keys = heapq.heappop(lanes)
                self.private -= own
                self.unpin(keys)
                served += 1
                blocked = False
            if prefill is not None:
                prefill[1] += chunk
                if prefill[1] >= prefill[2]:
                    rid, _, n, o, keys, m = prefill
                    ent = -(-(n + o) // PAGE)
                    self.private -= ent - m
                    new = [k for k in keys[m:] if k not in self.cached]
                    for k in new:
                        self.cached[k] = [0, 0]
                    tail = [("tail", rid)] if n % PAGE else []
                    for k in tail:
                        self.cached[k] = [0, 0]
                    self.use(keys[m:] + tail)
                    self.unpin(keys[:m])
                    if o > 0:
                        own = ent - n // PAGE
                        self.private += own
                        self.pin(keys)
                        heapq.heappush(lanes, (it + o, rid, own, keys))
                    else:
                        served += 1
                    prefill = None
                    blocked = False
        return {"reused_tokens": reused, "prompt_tokens": prompt_tokens,
                "hit_ratio": reused / prompt_tokens if prompt_tokens else 0.0, "requests": served,
                "rejected": rejected}
