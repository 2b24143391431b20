"""hami-devices vendor plugin for the Example Accelerator (a simulated device family)."""

from hami_example_accel.adapter import ExampleAdapter, ExampleDevice

__all__ = ["ExampleAdapter", "ExampleDevice"]
