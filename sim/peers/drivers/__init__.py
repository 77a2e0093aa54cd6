"""Driver scripts run by an engine venv's python (``python PATH``), never imported by kvsim: each imports only
its engine and the standard library and speaks JSON Lines with ``sim.peers.engines`` over stdin/stdout."""
