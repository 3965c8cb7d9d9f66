"""This host's network as ddpnet sees it: interfaces, routes, names, and which interface
gloo / NCCL / TensorPipe should use (``select``), plus the rendezvous preflight (``probe``).

Pure parts (``select``, the parsers, the preflight classifier) take data; the edges
(``list_interfaces``, ``route_to``, ``resolve_host``, sockets) read this host.
"""
