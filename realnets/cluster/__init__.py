"""Sweeps spread over a cluster: the blocks of `realnets.sweeps.runner` run as Ray tasks
(`ray_backend`), each with the resources asked for (`resources`); the driver stays the only
writer of the sweep directory. Ray is an optional extra: `pip install -e '.[cluster]'`."""
