"""Variables the operator hands its task process.  A module of their own: the operator must not import
``child`` (run as ``python -m ...child``, a child module imported by its package first is run twice, and
runpy warns of it in every task's log)."""

PARENT_VAR = "HAMI_AIRFLOW_PARENT"  # the pid of the operator's process, to close the race with its death
