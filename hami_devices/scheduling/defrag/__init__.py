"""Defragmentation: measuring it two ways, planning migrations within a budget, predicting demand.

* ``measure``: FGD's fragmentation rate and the operators' one;
* ``budget``: how many moves a round may make (per hour, per running task);
* ``plan``: the joint migration plan (a MIP solved by HiGHS, the ``[solver]`` extra), the greedy fallback;
* ``forecast``: the arrival mix learned over time, and the capacity it asks to keep free;
* ``checkpoint``: the hook a workload offers to be moved without losing its work;
* ``controller``: the threshold, the rounds, the moves through the engine and their ``task.migrated`` events.
"""
