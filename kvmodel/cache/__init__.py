"""The cache concepts (TokenSpeed): cache groups, token geometry, the LCM-parent block pool, the prefix index
and matchers, and the admission planner. Token quantities live in the group specs, geometry and prefix
modules; block quantities in the pool; GroupGeometry is the one conversion point. Does not import
kvmodel.store."""
