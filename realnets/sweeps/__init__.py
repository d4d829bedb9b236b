"""Sweeps over batch sizes: running and resuming a sweep directory, its curve, its report and published batch_science data."""
