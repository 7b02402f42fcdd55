"""Following the service's own database: ``docsrv snapshot follow`` (``follower.py``)."""
