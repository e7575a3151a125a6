# microtvm-gen board port rp2040: included by the project's CMakeLists.txt.
# Builds the second-stage boot (boot2.c, linked by boot2.ld to run from SRAM) on its own,
# without the C library, then boot2_crc.cmake pads it and appends the boot ROM's CRC32 as
# a C array in section .boot2, which linker.ld places first in flash.
set(MTVG_PORT_DIR ${CMAKE_CURRENT_SOURCE_DIR}/platform)
set(MTVG_BOOT2_ELF ${CMAKE_CURRENT_BINARY_DIR}/boot2.elf)
set(MTVG_BOOT2_BIN ${CMAKE_CURRENT_BINARY_DIR}/boot2.bin)
set(MTVG_BOOT2_IMAGE ${CMAKE_CURRENT_BINARY_DIR}/boot2_image.c)

# boot2.c is not part of the firmware itself.
set_source_files_properties(${MTVG_PORT_DIR}/boot2.c PROPERTIES HEADER_FILE_ONLY ON)

add_custom_command(
  OUTPUT ${MTVG_BOOT2_IMAGE}
  COMMAND ${CMAKE_C_COMPILER} -mcpu=cortex-m0plus -mthumb -Os -std=c99 -Wall -Wextra -Werror
          -ffreestanding -fno-builtin -nostdlib -nostartfiles -T ${MTVG_PORT_DIR}/boot2.ld
          ${MTVG_PORT_DIR}/boot2.c -o ${MTVG_BOOT2_ELF}
  COMMAND ${CMAKE_OBJCOPY} -O binary ${MTVG_BOOT2_ELF} ${MTVG_BOOT2_BIN}
  COMMAND ${CMAKE_COMMAND} -DBOOT2_BIN=${MTVG_BOOT2_BIN} -DOUTPUT=${MTVG_BOOT2_IMAGE}
          -P ${MTVG_PORT_DIR}/boot2_crc.cmake
  DEPENDS ${MTVG_PORT_DIR}/boot2.c ${MTVG_PORT_DIR}/boot2.ld ${MTVG_PORT_DIR}/boot2_crc.cmake
  COMMENT "RP2040 boot2: compile, pad to 252 bytes, append the boot ROM's CRC32"
  VERBATIM)
target_sources(firmware.elf PRIVATE ${MTVG_BOOT2_IMAGE})
set_source_files_properties(${MTVG_BOOT2_IMAGE} PROPERTIES
  COMPILE_OPTIONS "-std=c99;-Wall;-Wextra;-Werror")
