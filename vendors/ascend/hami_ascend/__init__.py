"""The Huawei Ascend adapter for hami-devices: DCMI through cffi."""

from hami_ascend.adapter import AscendAdapter

__all__ = ["AscendAdapter"]
