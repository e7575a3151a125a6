#!/usr/bin/env bash
# Installs what microtvm-gen needs on a Debian/Ubuntu machine, idempotently:
#  - as root: Debian's gcc, gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm,
#    gcc-riscv64-unknown-elf, picolibc-riscv64-unknown-elf, qemu-system-misc (the RISC-V
#    board), clang with libFuzzer, ccache (only the missing ones);
#  - a virtualenv in .venv with the package (editable) and its test tools.
# Prints the path of the virtualenv's bin directory on its last line.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "bootstrap: $*" >&2; }

need=()
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v arm-none-eabi-gcc >/dev/null || need+=(gcc-arm-none-eabi)
[ -d /usr/lib/arm-none-eabi/newlib ] || need+=(libnewlib-arm-none-eabi)
command -v qemu-system-arm >/dev/null || need+=(qemu-system-arm)
# The qemu-riscv32 board: RV32 cross compiler, picolibc, qemu-system-riscv32.
command -v riscv64-unknown-elf-gcc >/dev/null || need+=(gcc-riscv64-unknown-elf)
[ -f /usr/lib/picolibc/riscv64-unknown-elf/picolibc.specs ] || need+=(picolibc-riscv64-unknown-elf)
command -v qemu-system-riscv32 >/dev/null || need+=(qemu-system-misc)
# clang and its libFuzzer runtime: the fuzz harnesses' short runs in the suite.
command -v clang >/dev/null || need+=(clang)
# ccache: builds (and the suite's many builds of the same runtime) reuse compiled files.
command -v ccache >/dev/null || need+=(ccache)
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null \
  || need+=(libclang-rt-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${need[*]} with apt-get"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  else
    log "missing ${need[*]}: install them (as root: apt-get install ${need[*]})"
  fi
fi

venv="$root/.venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  # venv's own pip setup (ensurepip) byte-compiles all of pip: 8 s of 8.3 here. Where this
  # Python's pip can install into another interpreter (--python, pip 22.3+), it installs
  # pip into the bare venv without compiling (3 s); otherwise venv does it as usual.
  "$python" -m venv --without-pip "$venv" >&2
  if ! "$python" -m pip --python "$venv/bin/python" install -q --no-compile \
      --disable-pip-version-check pip >&2 2>/dev/null; then
    "$python" -m venv --clear "$venv" >&2
  fi
fi
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "installing microtvm-gen and its dependencies into $venv"
  # --no-compile: Python compiles a module when it is first imported (test.sh and demo.sh
  # let it keep the result), not every module of every package up front (14 s of 43 here).
  "$venv/bin/python" -m pip install -q --no-compile --disable-pip-version-check -e "$root[test]" >&2
  touch "$stamp"
fi
echo "$venv/bin"
