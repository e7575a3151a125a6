#!/usr/bin/env python3
"""microtvm-gen's Project API server (protocol v1, as TVM 0.18's client speaks it).

One file for every template: templates/<template>/microtvm_api_server.py is a link to it
in the repository and a copy in a wheel. In a template folder it is a template server:
`generate_project` renders a project. Every generated project carries a copy: there it
builds, flashes, and opens the device's link (`open_transport`, `read_transport`,
`write_transport`, `close_transport`). It serves the folder it was started from (the link's
folder, not its target's). It needs only the standard library and the microtvm-gen
package; `launch_microtvm_api_server.sh` finds an interpreter that has the package.
"""

import pathlib
import sys

try:
    from generator.project_api.handler import serve_directory
except ImportError:
    sys.stderr.write("microtvm_api_server.py: the microtvm-gen package is not importable by "
                     f"{sys.executable}; install it (pip install microtvm-gen) or set "
                     "MICROTVM_GEN_PYTHON to an interpreter that has it\n")
    sys.exit(2)

if __name__ == "__main__":
    # absolute(), not resolve(): a template's server is a symbolic link to this file.
    sys.exit(serve_directory(pathlib.Path(__file__).absolute().parent))
