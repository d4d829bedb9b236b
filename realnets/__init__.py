"""realnets: steps to result against batch size, measured on real networks and real data.

The protocol of Shallue et al. 2018 on a JAX data-parallel trainer: `datasets` (offline data),
`models` (flax), `tasks` and `workloads` (what is trained, to which goal), `mesh` and `step` (the
sharded, jit-compiled train step with the gradient noise scale of `gradient_noise`), `trainer`
(trials of one batch size), `search` (quasi-random metaparameters), `sweep` and `store` (the
resumable sweep directory), `report`, `batch_science` (published data), `curvature` and
`calibrate` (an NQM fitted to a network), `validate` and `validation_report` (predicted against
measured B_crit) and `cli`.
"""
