"""The rule families of DESIGN §7; importing this package registers every rule."""

from kvsim.spec.rules import cap, page, space, writer, entitlement, unit, replica, checkpoint, consumer, trace  # noqa: F401
from kvsim.spec.rules import cache_pool, cache_prefix, cache_admission, cache_geometry, cache_tables  # noqa: F401

from kvsim.kvmodel.store.units import COMMIT_RULES, LAUNCH_RULES  # noqa: E402
from kvsim.spec.catalogue import require  # noqa: E402

# the model counts these rules on its hot paths by id: they must be catalogue rules
require(LAUNCH_RULES, "kvmodel.store.units.LAUNCH_RULES")
require(COMMIT_RULES, "kvmodel.store.units.COMMIT_RULES")
