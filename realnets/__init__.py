"""realnets: measuring steps to result on real networks and real data (in progress).

So far: the offline data sets (`realnets.datasets`). The trainer, sweep protocol and CLI of
issue 3 are still to come.
"""
