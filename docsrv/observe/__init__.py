"""What an operator sees of the processes: their log lines (``logs.py``), the request metrics of
every worker (``metrics.py``) and of the processes themselves (``process_metrics.py``), and the
status a master shares with its workers (``runtime.py``)."""
