"""This host's network as ddpnet sees it: interfaces, routes (and the default route), names,
which interface a job uses (``select``: ``select`` for the variables ``init()`` exports,
``choose_interface`` for every command's "which NIC"), which firewalls are active and their
rule sets (``firewall``), a free port (``ports``), plus the rendezvous preflight (``probe``).

Pure parts (the selectors, the parsers, the preflight classifier) take data; the edges
(``list_interfaces``, ``route_to``, ``default_route_iface``, ``resolve_host``,
``choose_for_host``, ``firewall.read_state``, sockets) read this host.
"""
