"""Starting firmware and talking to it: runners (host process, QEMU) behind one interface."""

from generator.device.runner import Device, open_device

__all__ = ["Device", "open_device"]
