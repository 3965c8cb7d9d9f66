"""The directory ``ddpnet launch`` and ``ddpnet exec`` put first on the ranks' PYTHONPATH: its
``sitecustomize`` attaches the watch to a script's own ``init_process_group`` when
``DDPNET_WATCH_ATTACH=1`` (``ddpnet.watch.attach``). Nothing else may live here: every module
in it shadows a top-level name of the ranks' interpreter."""
