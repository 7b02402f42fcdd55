"""docsrv: a read replica of a documentation-hosting JSON API, served from a snapshot."""

#: The version, which pyproject.toml reads (``tool.setuptools.dynamic``): every process names it
#: (records it writes, /metrics, --version) without importing ``importlib.metadata``.
__version__ = "0.1.0"
