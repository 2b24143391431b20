"""The ``hami-devices`` command line."""
