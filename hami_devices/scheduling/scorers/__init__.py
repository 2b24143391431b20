"""Built-in scorers, registered as entry points in ``hami_devices.scorers``."""
