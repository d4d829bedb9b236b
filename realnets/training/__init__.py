"""Training one batch size: the device mesh, the sharded train step, the trainer of a block of trials and the metaparameter search."""
