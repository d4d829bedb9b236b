"""What is trained, on which data, to which goal: data sets, models, tasks and the workload
catalogue (`catalog`), whose public names this package re-exports."""

from realnets.workloads.catalog import NQM_WORKLOAD, TEXT_CONTEXT, WORKLOADS, Workload, get

__all__ = ["NQM_WORKLOAD", "TEXT_CONTEXT", "WORKLOADS", "Workload", "get"]
