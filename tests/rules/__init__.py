"""Per-rule tests of the store contract's catalogue: legal behaviour keeps each rule, a crafted violation fires it."""
