"""Serving: the listener (server.py), the per-session worker processes (pool.py, worker.py) and the request loop
that drives a session (loop.py, with a trio driver in runner.py and a blocking one in worker.py)."""
