"""The network observer: reads what one router knows of the whole network (every router's advertisement and
traffic report, carried over the links), keeps totals across router restarts, and serves them as upstream's network
observer does: an HTTP API in the shape of ``/api/v2alpha1/...``, Prometheus metrics with upstream's names, and a
console in the browser.

Layers: :mod:`.totals` (counters that survive router restarts), :mod:`.model` (records from a snapshot, pure),
:mod:`.query` (list queries and envelopes, pure), :mod:`.metrics` (Prometheus text, pure), :mod:`.server` (the
poll loop and the HTTP server, I/O), ``console/`` (static files served as they are).
"""
