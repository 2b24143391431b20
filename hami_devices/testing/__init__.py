"""Test doubles for code that embeds the SDK: importing this package says "not production"."""

from hami_devices.testing.binders import FileRecordingBinder, RecordingBinder

__all__ = ["FileRecordingBinder", "RecordingBinder"]
