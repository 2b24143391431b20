"""Defragmentation research: the joint migration plan as a MIP (the defragmenter's ``milp`` planner)."""
