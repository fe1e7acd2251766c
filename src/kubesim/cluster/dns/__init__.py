"""Names in the simulated cluster: ``names`` (what cluster DNS and the nodes' resolvers would answer:
``Cluster.resolve``), ``hostnames`` (the cluster DNS server and SOCKS5 proxy on loopback addresses of the cluster's
block) and ``poddns`` (a Pod's ``/etc/resolv.conf``, pure).
"""
