"""What the caches in front need: the purge keys a reply carries and a change touches
(``keys.py``), those of a change between two snapshots (``diff.py``), and their delivery to a
cache's purge API (``delivery.py``)."""
