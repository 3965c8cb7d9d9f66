"""Node checks: one module per family (``rendezvous``, ``names``, ``interfaces``, ``firewall``,
``selinux``, ``sysctl``, ``software``, ``rdma``, ``environment``), run together by
:func:`ddpnet.doctor.run.run_doctor`."""
