#!/bin/sh
# Starts microtvm_api_server.py ($1, then its arguments) with a Python that has the
# microtvm-gen package: $MICROTVM_GEN_PYTHON as it is (the server says in one line when
# that Python lacks the package), else the first of python3 and python on PATH that can
# import it. TVM's Project API client runs this script when it exists.
server="$1"
shift
if [ -n "${MICROTVM_GEN_PYTHON:-}" ]; then
  exec "$MICROTVM_GEN_PYTHON" "$server" "$@"
fi
for py in python3 python; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c "import generator.project_api" 2>/dev/null; then
    exec "$py" "$server" "$@"
  fi
done
echo "launch_microtvm_api_server.sh: no Python with the microtvm-gen package; set MICROTVM_GEN_PYTHON" >&2
exit 2
