"""The rule families of DESIGN §7; importing this package registers every rule."""

from kvsim.kvmodel.store.units import COMMIT_RULES, LAUNCH_RULES  # noqa: E402
from kvsim.spec.catalogue import require  # noqa: E402
from kvsim.spec.rules import (  # noqa: F401 — imported to register each family's rules
    cache_admission,
    cache_capacity,
    cache_clauses,
    cache_config,
    cache_geometry,
    cache_l2,
    cache_l3,
    cache_pool,
    cache_prefix,
    cache_reference,
    cache_state,
    cache_tables,
    cap,
    checkpoint,
    consumer,
    entitlement,
    kv_events,
    page,
    peer_contract,
    peer_engine,
    peer_hybrid,
    peer_policy,
    peer_structure,
    peer_tier,
    replica,
    space,
    trace,
    unit,
    writer,
)

# the model counts these rules on its hot paths by id: they must be catalogue rules
require(LAUNCH_RULES, "kvmodel.store.units.LAUNCH_RULES")
require(COMMIT_RULES, "kvmodel.store.units.COMMIT_RULES")
