"""realnets: steps to result against batch size, measured on real networks and real data.

The protocol of Shallue et al. 2018 on a JAX data-parallel trainer, in seven sub-packages, each
importing only from the ones listed before it (and from `nqm`):

- `workloads`: offline data sets, flax models, tasks, the catalogue of named workloads and the
  user's own (`own`);
- `training`: the device mesh, the jit-compiled sharded train step with its gradient noise
  scale, the trainer of one batch size's trials and the quasi-random metaparameter search;
- `sweeps`: the resumable sweep directory, its curve and report, and published batch_science data;
- `cluster`: a sweep's blocks of trials as Ray tasks (`--backend ray`), the same files;
- `planning`: seconds per step on the devices present, and the time-and-cost plan of a sweep;
- `calibration`: the curvature and noise of a trained network, and an NQM fitted to them;
- `validation`: the predicted critical batch size against the measured one, and its report.

`store` holds the atomic JSON file helpers they share; `cli` is the command line
(`python -m realnets`). See docs/design.md for the maths and the file formats.
"""
