"""A package, so that the package-scoped Ray cluster of conftest.py ends with this folder: in a
plain folder pytest keeps it to the end of the session, and every later test would run on it."""
