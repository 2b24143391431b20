"""Placement research: what measures and bounds the schedulers, not what a scheduler runs.

Named for its audience: a scheduler never imports it (the layer test holds every other module of the
package to that at import time); a study of placement quality does.  Its solver comes with the
``[research]`` extra (``pip install 'hami-devices[research]'``); without it the solving functions raise
``MissingExtra`` naming that extra, and the core is unaffected.

* ``bound``: the offline limit of an openb replay (a configuration-LP bound, also under the admission rule,
  a feasible offline packing, an independent checker).
"""
