"""The package version, where every layer may read it (rgpu/__init__ sits above the servers and the shims)."""

__version__ = "0.2.0"
