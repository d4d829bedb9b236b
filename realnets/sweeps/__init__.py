"""Sweeps over batch sizes: the sweep directory's records (records), running and resuming it
(runner), its curve (curve), its report and published batch_science data."""
