"""The rule families of DESIGN §7; importing this package registers every rule."""

from kvsim.spec.rules import cap, page, space, writer, entitlement, unit, replica, checkpoint, consumer, trace  # noqa: F401
