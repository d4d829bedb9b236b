"""Planning a run on the user's devices: step time against batch size and device count
(`throughput`, `step_time`) combined with steps to result from a sweep (`plan`)."""
