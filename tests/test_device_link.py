"""The standalone app over its link: malformed traffic is refused and the link stays in sync.

Runs the host build under ASan/UBSan, so any out-of-bounds access fails the test.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from generator.boards import load_board
from generator.build import build
from generator.device.links import open_device
from generator.errors import DeviceError
from generator.link.app_client import AppClient
from generator.link.framing import encode_frame
from generator.project.generate import generate
from tests.conftest import YES_NO, require_board_tools

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sanitized_firmware(tmp_path_factory):
    require_board_tools("host")
    project = tmp_path_factory.mktemp("link") / "yes_no"
    generate(YES_NO / "model.tar", "host", project)
    return build(project, sanitize=True).elf


def _expect_error(client: AppClient, frame: bytes, text: str) -> None:
    client.device.write(frame)
    with pytest.raises(DeviceError, match=text):
        client._receive()


def test_malformed_requests_get_errors_and_the_link_survives(sanitized_firmware):
    yes = np.fromfile(YES_NO / "yes_0a2b400e_nohash_0.raw", dtype=np.int8).tobytes()
    rng = random.Random(1234)
    with open_device(load_board("host"), sanitized_firmware) as device:
        client = AppClient(device, timeout=30)
        hello = client.hello(30)
        assert hello.input_sizes == [1960] and hello.output_sizes == [4]
        _expect_error(client, encode_frame(b""), "empty frame")
        _expect_error(client, encode_frame(b"Z"), "unknown command")
        _expect_error(client, encode_frame(b"I\x05" + b"\0" * 4 + b"x"), "bad input request")
        _expect_error(client, encode_frame(b"I\x00" + struct.pack("<I", 1960) + b"x"),
                      "beyond the tensor")
        _expect_error(client, encode_frame(b"I\x00" + struct.pack("<I", 0xFFFFFFFF) + b"x"),
                      "beyond the tensor")
        _expect_error(client, encode_frame(b"O\x00" + struct.pack("<II", 2, 3)),
                      "beyond the tensor")
        _expect_error(client, encode_frame(b"O\x00" + struct.pack("<II", 0xFFFFFFFF, 2)),
                      "beyond the tensor")
        _expect_error(client, encode_frame(b"O\x09" + struct.pack("<II", 0, 1)),
                      "bad output request")
        # Noise and damaged frames: dropped silently by the device.
        for _ in range(200):
            frame = bytearray(encode_frame(bytes(rng.randrange(256) for _ in range(20))))
            frame[rng.randrange(2, len(frame))] ^= 1 << rng.randrange(8)
            noise = bytes(rng.randrange(256) for _ in range(rng.randrange(30)))
            device.write(noise.replace(b"\xff", b"") + bytes(frame))
        device.write(b"\xff\xfd" + struct.pack("<I", 1 << 30))  # an absurd length, abandoned
        # ...and the device still works, exactly.
        client.set_input(0, yes)
        assert client.run().status == 0
        assert list(np.frombuffer(client.get_output(0, 4), dtype=np.int8)) == [-128, -127, 126,
                                                                                -127]
        client.quit(0)
        assert device.wait(30) == 0
        assert "Sanitizer" not in device.stderr_text()
        assert "runtime error" not in device.stderr_text()


def test_chatty_stderr_does_not_block_the_link(tmp_path):
    """A device that writes more to stderr than a pipe holds must still answer."""
    import sys

    from generator.device.runner import Device

    script = tmp_path / "chatty.py"
    script.write_text("import sys\nsys.stderr.buffer.write(b'x' * 300000)\nsys.stderr.flush()\n"
                      "sys.stdout.buffer.write(b'done')\nsys.stdout.flush()\n")
    with Device([sys.executable, str(script)], "chatty process") as device:
        assert device.read(30) == b"done"
        assert device.wait(30) == 0
        assert len(device.stderr_text()) == 300000
