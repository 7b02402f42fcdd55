"""Doc search: the index in shards of versions (``build.py``, ``rebuild.py``, ``shards.py``), its
files and where they live (``index_files.py``, ``location.py``), and the query (``query.py``)
with what it ranks by (``named_entries.py``, ``code_syntax.py``, ``changelogs.py``) and its
highlight (``highlight.py``)."""
