"""What the caches in front need after a snapshot changes: the purge keys of the change
(``diff.py``) and their delivery to a cache's purge API (``delivery.py``)."""
