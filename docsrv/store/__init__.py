"""The loaded snapshot as it is served (``loaded.py``), and a changeset applied to it in memory
(``changes.py``)."""
