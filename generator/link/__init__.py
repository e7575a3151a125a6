"""The host side of the device link: framing, and the standalone app's requests."""
