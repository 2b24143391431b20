"""The Cambricon adapter for hami-devices: CNDev through cffi."""

from hami_cambricon.adapter import CambriconAdapter

__all__ = ["CambriconAdapter"]
