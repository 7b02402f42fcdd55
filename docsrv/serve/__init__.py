"""Serving: a snapshot taken (``served.py``), a worker's server over it (``worker.py``), the
changesets a pull keeps applied in every worker (``following.py``), and the master process that
runs the workers (``supervisors/``)."""
