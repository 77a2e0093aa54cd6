"""Seeded bugs of the store model's capacity resolution (kvmodel/store/capacity.py) for `kvsim selfcheck`, in the
record format of `catalogue.py` (which concatenates them): the automatic policy's formula, its refusal, the M range
and the backend pools. Each is killed by the `capacity` machine (sim/fuzz/capacity_machine.py, against the store
contract's formulas in sim/fuzz/capacity_reference.py). Plain data: no kvsim import here.
"""

MUTANTS = [
    dict(name="capacity-automatic-ceil", machine="capacity",
         bug="the automatic policy rounds (F - R - B_min)/B_step up: one page more than the free bytes hold",
         file="kvmodel/store/capacity.py",
         old="    return min(curve.m_max, curve.m_min + (free_bytes - headroom_bytes - curve.b_min) // curve.b_step)",
         new="    return min(curve.m_max, curve.m_min - (-(free_bytes - headroom_bytes - curve.b_min) "
             "// curve.b_step))"),
    dict(name="capacity-automatic-unclamped", machine="capacity",
         bug="the automatic policy forgets the M_max clamp: free memory beyond the all-lanes-full bound becomes pages",
         file="kvmodel/store/capacity.py",
         old="    return min(curve.m_max, curve.m_min + (free_bytes - headroom_bytes - curve.b_min) // curve.b_step)",
         new="    return curve.m_min + (free_bytes - headroom_bytes - curve.b_min) // curve.b_step"),
    dict(name="capacity-automatic-headroom-ignored", machine="capacity",
         bug="the automatic policy's requirement F >= R + B_min ignores the headroom: a device too small is accepted",
         file="kvmodel/store/capacity.py",
         old="    if free_bytes < headroom_bytes + curve.b_min:",
         new="    if free_bytes < curve.b_min:"),
    dict(name="capacity-m-min-is-l", machine="capacity",
         bug="M_min = L instead of max(L, C): a pool smaller than one page per active lane",
         file="kvmodel/store/capacity.py",
         old="    return max(lp, config.max_concurrency), config.max_concurrency * lp",
         new="    return lp, config.max_concurrency * lp"),
    dict(name="capacity-explicit-max-excluded", machine="capacity",
         bug="off-by-one in the explicit range check: an explicit capacity of exactly M_max pages is refused",
         file="kvmodel/store/capacity.py",
         old="    if not m_min <= m <= m_max:",
         new="    if not m_min <= m < m_max:"),
    dict(name="capacity-mtp-lead-floor", machine="capacity",
         bug="MTP pages = M + C·floor((K - 1)/P): a draft window just past a page boundary gets no extra page",
         file="kvmodel/store/capacity.py",
         old="        pages[\"mtp\"] = m + config.max_concurrency * ceil_div(config.backend.draft_window - 1, "
             "config.page_size)",
         new="        pages[\"mtp\"] = m + config.max_concurrency * ((config.backend.draft_window - 1) "
             "// config.page_size)"),
    dict(name="capacity-explicit-below-context", machine="capacity",
         bug="the explicit policy accepts a capacity one token short of max_context",
         file="kvmodel/store/capacity.py",
         old="    if tokens < max_context:",
         new="    if tokens < max_context - 1:"),
]
