"""The cachetrace/1 contract judge: what a prefix-caching scheduler's plans must show (TokenSpeed's rules TS-*,
PEER-1..4, 9, 10), judged record by record.

``contract.Contract`` owns the judge's state (which live table names which block, which prefix key each block
holds) and the core rules; each part judges one concern and is handed the contract, which it reads through a
narrow view (``view``: exactly what that part reads; no part imports ``contract``): ``host_tier`` (the Host
and L3 tiers, TS-L2-1..11), ``store_policy`` (what the write-back policy owes, TS-L2-12), ``l3_reads`` (what
an L3 get may read, TS-L2-13/14), ``state_group`` (snapshot-state groups, TS-ST-*), ``retraction`` (a
readmission's headroom, TS-ADM-2), ``capacity`` (single-request refusals and the page gauge, TS-ADM-3,
TS-POOL-5) and ``eviction`` (zero eviction first, TS-ADM-4). ``judge`` runs a recorded cachetrace/1 file
through the contract and the KV-event checks. The package knows cachetrace/1 records, never a scheduler's API:
TokenSpeed's adapter (``sim.peers.tokenspeed``) feeds it live, ``kvsim replay`` from a file.
"""
