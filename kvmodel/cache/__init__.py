"""The cache concepts (TokenSpeed): cache groups, token geometry, the LCM-parent block pool, the prefix index
and matchers, and the admission planner. Token quantities live in the group specs, geometry and prefix
modules; block quantities in the pool; GroupGeometry is the one conversion point. Does not import
kvmodel.store.

Entry points: CacheConfig + CacheGroupSpec (group_spec.full / sliding / state) declare a cache;
CacheCoordinator runs probe → admit → publish → free over it; CacheState is what the TS-* checkers read
(spec.cache_checking.check_cache); kvmodel.cache.api is the surface for differential tests.
"""
