"""``blake2b`` for content hashes and stable ids, without importing ``hashlib``: hashlib loads
OpenSSL at import (~3 ms of every command) for algorithms the index never uses, and its own
``blake2b`` is this same builtin (``hashlib.blake2b is _blake2.blake2b``)."""

try:
    from _blake2 import blake2b
except ImportError:  # a Python built without its own blake2: hashlib's, whatever it is
    from hashlib import blake2b

__all__ = ["blake2b"]
