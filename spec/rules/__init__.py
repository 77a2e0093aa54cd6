"""The rule families of DESIGN §7; importing this package registers every rule."""

from kvsim.spec.rules import cap, page, space, writer, entitlement, unit, replica, checkpoint, consumer, trace  # noqa: F401
from kvsim.spec.rules import cache_pool, cache_prefix, cache_admission, cache_geometry, cache_tables  # noqa: F401
