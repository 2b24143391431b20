"""The placement rules as one table, and the one evaluator every consumer runs them through.

``table``: the rows (reason code, kind, test or limit), in groups typed by what
they judge; ``columns``: the views the rows read, for a whole cluster or one
device; ``demand``: what a part needs of each device (the plain share, or the
vendor's rounding); ``evaluate``: the evaluator.
"""

from hami_devices.rules.columns import DeviceView, Names, NodeNames, NodeView, model_names, one_device
from hami_devices.rules.demand import Apart, Demand, HostDemand, memory_need, plain_share, plan
from hami_devices.rules.evaluate import (
    check_grant,
    evaluate,
    failures,
    first_failure,
    fits_after,
    passing,
    shortfall,
)
from hami_devices.rules.table import (
    BEFORE_ROUNDING,
    DEVICE_CODES,
    DEVICE_RULES,
    FIT_RULES,
    MATCH_RULES,
    NODE_CODES,
    NODE_RULES,
    PART_NODE_CODES,
    PART_NODE_RULES,
    ROUND_RULES,
    STATE_RULES,
    USAGE_CODES,
    Kind,
    Limit,
    Rule,
)

__all__ = [
    "BEFORE_ROUNDING",
    "DEVICE_CODES",
    "DEVICE_RULES",
    "FIT_RULES",
    "MATCH_RULES",
    "NODE_CODES",
    "NODE_RULES",
    "PART_NODE_CODES",
    "PART_NODE_RULES",
    "ROUND_RULES",
    "STATE_RULES",
    "USAGE_CODES",
    "Apart",
    "Demand",
    "DeviceView",
    "HostDemand",
    "Kind",
    "Limit",
    "Names",
    "NodeNames",
    "NodeView",
    "Rule",
    "check_grant",
    "evaluate",
    "failures",
    "first_failure",
    "fits_after",
    "memory_need",
    "model_names",
    "one_device",
    "passing",
    "plain_share",
    "plan",
    "shortfall",
]
