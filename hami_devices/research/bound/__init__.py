"""The offline limit of an openb replay: the instance, a configuration-LP bound (also under the admission rule),
a feasible offline packing and an independent checker.  Needs the ``[research]`` extra (HiGHS) where it solves."""
