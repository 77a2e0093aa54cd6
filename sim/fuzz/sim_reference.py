"""An independent reference of `kvsim simulate`'s scheduler, for the `simulate` fuzz machine: the README's policy
("Simulating workloads") written out directly, with physical pages and retained prompts and nothing else.

It imports nothing of kvsim (the standard library only; a test enforces the boundary) and shares no code or
data structure with `sim/simulate/`: no store model, no trace events, no prefix index. It started from
`tests/reference_scheduler.py` (a block-level LRU kept for the hit-ratio comparison on whole workloads) and
follows the README where that one simplifies: retained prompts, not single pages, give way, and every
admission, retention and completion is reported as a per-request fact.

The policy, as the README states it:

* One FIFO queue; a prompt longer than max_context, or empty, is rejected on arrival; an output is cut to
  max_context − prompt.
* One prefill at a time, admitted when fewer than concurrency − 1 requests decode. The head reuses the longest
  prefix of its full 64-token pages that a retained prompt holds, at most floor((prompt − 1)/64) pages (the
  last prompt token is always computed). A page's key chains the block id of its 512-token block, its place in
  the block and the key before it: equal keys, equal content and equal prefix. Among the retained prompts
  holding the deepest matched page it takes the one with the fewest pages (the closest frontier), the most
  recently used among equals.
* It needs ceil((prompt + output)/64) − reused + 1 pages (the + 1: the decode continuation's copy of the
  prompt's partial last page), plus one when the checkpoint it reuses has a partial last page (the Fork copies
  it). When fewer are free, least-recently-used retained prompts give way (released, one pass), skipping the
  one it reuses and those whose full pages all are in use by running requests. A retained prompt is used when
  retained and when reused. When that is not enough the head waits for running requests; with nothing running
  it retries from the root (the reused prompt itself may be in the way); a request alone in the store may do
  without the tail copy's page (its decode continuation then takes over the prompt's checkpoint); one that
  cannot fit even so is rejected.
* Reuse: Fork shares the matched pages; Move (the reused checkpoint is a request's whole prompt and the new
  prompt holds all of it) takes the checkpoint over. A reused checkpoint holding full pages beyond the match,
  or lying beyond the prompt, is cut at the match by a helper, which retains that prefix as a checkpoint of
  its own (used now) and the request Forks that.
* Each iteration the prefill advances by up to `chunk` tokens and every decoding request by one token; when
  the prefill completes its prompt is retained (its full pages and its partial last page) and the request
  decodes `output` iterations by Fork (a private copy of the partial last page and its output pages). When
  the Fork does not fit, least-recently-used prompts give way until one more page is free; when it still does
  not fit, the decode continuation takes the prompt's checkpoint over (Move: no longer retained). Pages return
  when the request finishes; the retained prompt stays cached.
* `admission="wait"`: prompts give way only for what the decoding requests will not return when they finish
  (their private pages and the pages no one else holds).
* Virtual time: one iteration = base + prefill tokens · per_token + decoding requests · per_lane.

`ReferenceScheduler(capacity, ...).run(rows)` takes rows (arrival seconds, prompt, output, block ids) and
returns `facts` (per-request, in the order they happen) and `stats`.
"""

from __future__ import annotations

from collections import OrderedDict

PAGE = 64
PAGES_PER_BLOCK = 8


class Page:
    """A physical Device page: how many retained prompts and running requests hold it."""

    __slots__ = ("refs",)

    def __init__(self) -> None:
        self.refs = 0


class Retained:
    """A retained checkpoint: its frontier, its full pages' keys and pages (aligned), its partial last page and
    its kind ("prompt": a request's whole prompt; "split": a prefix a helper cut at a match)."""

    __slots__ = ("key", "frontier", "keys", "pages", "tail", "kind")

    def __init__(self, rid: int, frontier: int, keys: list, pages: list, tail: Page | None, kind: str) -> None:
        self.key = rid if kind == "prompt" else -1 - rid  # one prompt and one split per request at most
        self.frontier, self.keys, self.pages, self.tail, self.kind = frontier, keys, pages, tail, kind


class Running:
    """A running request: prefill or decode; the pages it holds (shared or its own), its private page count
    (reserved or leased for it alone), its progress."""

    __slots__ = ("rid", "n", "o", "keys", "m", "frontier", "end", "held", "private")

    def __init__(self, rid, n, o, keys, m, frontier, end, held, private) -> None:
        self.rid, self.n, self.o, self.keys, self.m = rid, n, o, keys, m
        self.frontier, self.end, self.held, self.private = frontier, end, held, private


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class ReferenceScheduler:
    def __init__(self, capacity: int, concurrency: int = 256, max_context: int = 131072, chunk: int = 8192,
                 base: float = 0.008, per_token: float = 2.0e-5, per_lane: float = 1.0e-4,
                 admission: str = "evict") -> None:
        self.capacity, self.concurrency, self.max_context, self.chunk = capacity, concurrency, max_context, chunk
        self.admission = admission  # "evict": cached prompts give way; "wait": only for what lanes will not return
        self.lanes: list[Running] = []
        self.base, self.per_token, self.per_lane = base, per_token, per_lane
        self.ids: dict[tuple, int] = {}
        self.retained: OrderedDict[int, Retained] = OrderedDict()  # least recently used first
        self.live = 0  # pages with a holder
        self.private = 0  # pages running requests hold privately (reserved or leased)
        self.running_pages: dict[int, int] = {}  # id(page) -> running requests holding it
        self.facts: list[tuple] = []
        self.it = 0
        self.prefill: Running | None = None
        self.s = dict(requests=0, rejected=0, prompt_tokens=0, reused_tokens=0, checkpoints_evicted=0)

    # -- pages ----------------------------------------------------------------------------------
    def keys(self, prompt: int, blocks: list) -> list[int]:
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
        return self.capacity - self.live - self.private

    def hold(self, page: Page) -> None:
        if page.refs == 0:
            self.live += 1
        page.refs += 1

    def drop(self, page: Page) -> None:
        page.refs -= 1
        if page.refs == 0:
            self.live -= 1

    def new_page(self) -> Page:
        p = Page()
        self.hold(p)
        return p

    def run_hold(self, pages) -> None:
        for p in pages:
            self.running_pages[id(p)] = self.running_pages.get(id(p), 0) + 1

    def run_drop(self, pages) -> None:
        for p in pages:
            n = self.running_pages[id(p)] - 1
            if n:
                self.running_pages[id(p)] = n
            else:
                del self.running_pages[id(p)]

    # -- retained prompts ---------------------------------------------------------------------------
    def retain(self, c: Retained) -> None:
        self.retained[c.key] = c

    def use(self, c: Retained) -> None:
        self.retained.move_to_end(c.key)

    def release(self, c: Retained) -> None:
        del self.retained[c.key]
        self._drop_all(c)

    def _drop_all(self, c: Retained) -> None:
        for p in c.pages:
            self.drop(p)
        if c.tail is not None:
            self.drop(c.tail)

    def in_use(self, c: Retained) -> bool:
        """Every full page is in use by a running request (one holding a page holds the prefix before it)."""
        return bool(c.pages) and id(c.pages[-1]) in self.running_pages

    def give_way(self, need: int, protect, pending: int = 0) -> bool:
        """Least-recently-used retained prompts are released (one pass) until `need` pages are free, or until
        the pages running requests will return (`pending`) cover the rest; whether `need` pages are free."""
        if self.free() + pending >= need:
            return self.free() >= need
        for key in list(self.retained):
            c = self.retained[key]
            if c is protect or self.in_use(c):
                continue
            self.release(c)
            self.s["checkpoints_evicted"] += 1
            if self.free() + pending >= need:
                break
        return self.free() >= need

    def returns(self) -> int:
        """The pages the decoding requests return when they finish: their private pages, and the pages no one
        else holds (a decode that took its prompt's checkpoint over holds them alone)."""
        return sum(lane.private + sum(1 for p in lane.held if p.refs == 1) for lane in self.lanes)

    def lookup(self, keys: list) -> tuple[Retained | None, int]:
        """The deepest matched page and the retained prompt reused for it: the fewest pages, then the most
        recently used."""
        depth, best = 0, None
        for c in self.retained.values():  # least recently used first: a later equal one replaces it
            d = 0
            while d < len(c.keys) and d < len(keys) and c.keys[d] == keys[d]:
                d += 1
            if d > depth or (d == depth and d > 0 and best is not None and len(c.keys) <= len(best.keys)):
                depth, best = d, c
        return best, depth

    # -- the scheduler ------------------------------------------------------------------------------
    def admit(self, rid: int, n: int, o: int, keys: list, running: bool) -> str:
        """'admitted', 'wait' or 'rejected'."""
        c, depth = self.lookup(keys)
        m = min(depth, (n - 1) // PAGE)
        if m == 0:
            c = None
        ent = ceil_div(n + o, PAGE)
        # `wait` "evicts only for what running requests will not return when they finish"
        pending = self.returns() if self.admission == "wait" else 0
        while True:
            need = ent - m + 1 + (1 if c is not None and c.tail is not None else 0)
            if self.give_way(need, c, pending):
                break
            if running:
                return "wait"
            if c is None and need - 1 <= self.free():
                break  # alone in the store
            if c is None:
                self.s["rejected"] += 1
                self.facts.append(("reject", rid, "more pages than the store has"))
                return "rejected"
            c, m = None, 0
        self.s["prompt_tokens"] += n
        self.s["reused_tokens"] += m * PAGE
        held: list = []
        if c is not None:
            move = c.kind == "prompt" and depth == len(c.keys)
            if move:
                del self.retained[c.key]  # taken over (by the helper, or by the request itself)
            else:
                self.use(c)
            if c.frontier > n or len(c.keys) > m:
                # a helper cuts c at the match and retains the prefix (used now); the request Forks it
                split = Retained(rid, m * PAGE, c.keys[:m], c.pages[:m], None, "split")
                for p in split.pages:
                    self.hold(p)
                if move:  # c was taken over by the helper: what lies past the match goes
                    self._drop_all(c)
                self.retain(split)
                c, move = split, False
            held = c.pages[:m]
            for p in held:
                self.hold(p)
            if move:
                self._drop_all(c)  # its holds passed to the request (held above), its partial tail returns
        self.run_hold(held)
        self.private += ent - m
        self.facts.append(("admit", rid, self.it, m, self.free()))
        self.prefill = Running(rid, n, o, keys, m, m * PAGE, n, held, ent - m)
        return "admitted"

    def prefill_done(self, pf: Running) -> Running | None:
        n, o, m = pf.n, pf.o, pf.m
        self.private -= pf.private
        self.run_drop(pf.held)
        own = [self.new_page() for _ in range(n // PAGE - m)]
        tail = self.new_page() if n % PAGE else None
        k = Retained(pf.rid, n, pf.keys, pf.held + own, tail, "prompt")  # the request's holds pass to k
        self.retain(k)
        if o == 0:
            self.s["requests"] += 1
            self.facts.append(("retain", pf.rid, self.it, self.free(), "none"))
            return None
        ent = ceil_div(n + o, PAGE)
        fork = ent - n // PAGE  # the tail copy and the output pages
        how = "fork"
        if self.free() < fork:
            self.give_way(self.free() + 1, k)
            if self.free() < fork:
                how = "move"
        if how == "fork":
            held = list(k.pages)
            for p in held:
                self.hold(p)
            private = fork
        else:
            del self.retained[k.key]
            held = k.pages + ([] if k.tail is None else [k.tail])
            private = ent - ceil_div(n, PAGE)
        self.run_hold(held)
        self.private += private
        self.facts.append(("retain", pf.rid, self.it, self.free(), how))
        return Running(pf.rid, n, o, pf.keys, m, n, n + o, held, private)

    def finish(self, lane: Running) -> None:
        self.private -= lane.private
        self.run_drop(lane.held)
        for p in lane.held:
            self.drop(p)
        self.s["requests"] += 1
        self.facts.append(("served", lane.rid, self.it))

    def run(self, rows) -> dict:
        S, C = self.max_context, self.concurrency
        queue: list = []
        head = nxt = 0
        now = 0.0
        self.prefill = None
        lanes = self.lanes
        blocked = False
        while True:
            while nxt < len(rows) and rows[nxt][0] <= now:
                _, n, o, blocks = rows[nxt]
                if n < 1 or n > S:
                    self.s["rejected"] += 1
                    self.facts.append(("reject", nxt, "empty prompt" if n < 1 else "longer than max_context"))
                else:
                    queue.append((nxt, n, min(o, S - n), self.keys(n, blocks)))
                nxt += 1
            if self.prefill is None and head < len(queue) and len(lanes) + 2 <= C and not blocked:
                rid, n, o, keys = queue[head]
                got = self.admit(rid, n, o, keys, bool(lanes))
                blocked = got == "wait"
                if not blocked:
                    head += 1
            pf = self.prefill
            if pf is None and not lanes:
                if head < len(queue):
                    continue
                if nxt >= len(rows):
                    break
                now = max(now, rows[nxt][0])
                continue
            chunk = min(self.chunk, pf.end - pf.frontier) if pf is not None else 0
            now += self.base + chunk * self.per_token + len(lanes) * self.per_lane
            self.it += 1
            done = []
            for lane in lanes:
                lane.frontier += 1
                if lane.frontier >= lane.end:
                    done.append(lane)
            for lane in done:
                lanes.remove(lane)
                self.finish(lane)
                blocked = False
            if pf is not None:
                pf.frontier += chunk
                if pf.frontier >= pf.end:
                    self.prefill = None
                    decode = self.prefill_done(pf)
                    if decode is not None:
                        lanes.append(decode)
                    blocked = False
        return {"facts": self.facts, "stats": dict(self.s, iterations=self.it, checkpoints_left=len(self.retained))}
