"""Moved to ``hami_devices.research.bound``; its submodules here warn and forward for one release."""
