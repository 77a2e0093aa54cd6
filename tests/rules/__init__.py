"""Per-rule tests of the store contract's catalogue: for every rule, legal behaviour keeps it and a crafted violation fires it."""
