"""The bundled kvtrace/1 scenarios (package data) and the builder that writes them."""
