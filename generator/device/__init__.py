"""Starting firmware and talking to it: links (host process, QEMU, serial port) behind one
interface, flash runners for physical boards."""

from generator.device.links import LINKS, Link, link_of, open_device
from generator.device.runner import Device

__all__ = ["LINKS", "Device", "Link", "link_of", "open_device"]
