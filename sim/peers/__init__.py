"""Peers: real schedulers and engines kvsim judges from outside (TokenSpeed's scheduler driven live, KV-event
logs of any engine). Each adapter turns what the peer shows into cachetrace/1 or KV-event records; the
judges (``contract``, ``events``) know the records, never the peer."""
