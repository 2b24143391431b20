"""Defragmentation: measuring it two ways, planning migrations within a budget, predicting demand.

* ``measure``: FGD's fragmentation rate and the operators' one;
* ``budget``: how many moves a round may make (per hour, per running task);
* ``plan``: the planner interface and the greedy plan; the joint plan (a MIP solved by HiGHS) is research's
  (``hami_devices.research.defrag.milp``, the ``[research]`` extra), found by name as the ``milp`` planner;
* ``forecast``: the arrival mix learned over time, and the capacity it asks to keep free;
* ``checkpoint``: the hook a workload offers to be moved without losing its work;
* ``controller``: the threshold, the rounds, the moves through the engine and their ``task.migrated`` events.
"""
