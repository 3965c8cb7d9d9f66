"""An unmodified user script: env:// with gloo, as the guides write it. Prints one JSON line."""

import json
import os
import sys

import torch
import torch.distributed as dist

fail_marker = os.environ.get("FAIL_ONCE_MARKER")
if fail_marker and int(os.environ.get("RANK", "0")) == 1 and not os.path.exists(fail_marker):
    open(fail_marker, "w").close()
    sys.exit(3)  # the first attempt of rank 1 fails: torchrun must restart the group

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
# one write per line: ranks share the pipe (a print is two writes when unbuffered)
sys.stdout.write(json.dumps({
    "rank": dist.get_rank(), "world_size": dist.get_world_size(),
    "env_rank": os.environ.get("RANK"), "local_rank": os.environ.get("LOCAL_RANK"),
    "local_world_size": os.environ.get("LOCAL_WORLD_SIZE"),
    "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
    "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
    "restart": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
    "launcher": os.environ.get("DDPNET_LAUNCHER"),
    "sum": t.item(),
}) + "\n")
sys.stdout.flush()
dist.destroy_process_group()
