"""A replica following its origin: the origin written (``publish.py``), a snapshot or its
changesets pulled from it (``pull.py``, ``fetch.py``), the changesets kept after the snapshot
served and their fold (``kept.py``), and the search index of each state (``indexing.py``,
``changeset_index.py``); ``sidecar.py`` pulls again and again."""
