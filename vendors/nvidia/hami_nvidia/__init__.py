"""The NVIDIA adapter for hami-devices: NVML through nvidia-ml-py."""

from hami_nvidia.adapter import NvidiaAdapter

__all__ = ["NvidiaAdapter"]
