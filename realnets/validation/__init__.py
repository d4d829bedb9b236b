"""The calibrated NQM's critical batch size against the measured one: settings, the calibration rerun, predictions, their bootstrap, the comparison table, files and the report."""
