/*
 * microtvm-gen board port rp2040: the second-stage boot ("boot2") for W25Q-style QSPI flash.
 *
 * The RP2040 boot ROM copies the first 256 bytes of flash to SRAM at 0x20041F00, checks
 * the CRC32 in the last 4 of them (polynomial 0x04C11DB7, initial value 0xFFFFFFFF, no
 * reflection, no final XOR; computed at build time by boot2_crc.cmake) and calls offset 0
 * in Thumb state. This code then:
 *   1. sets the flash's Quad Enable bit (status register 2, bit 1) if it is clear,
 *      using 35h (read SR2), 06h (write enable), 01h + SR1 + SR2 (write status), 05h (busy);
 *   2. reconfigures the XIP SSI for the quad I/O fast read, EBh with 24 address bits and
 *      the mode byte A0h ("continuous read": later reads skip the command byte), four dummy
 *      clocks, SCK = clk_sys / 2;
 *   3. issues one read so the flash enters continuous read mode, and switches the SSI to
 *      send only address + mode from then on;
 *   4. points VTOR at the application's vector table (0x10000100), loads its initial stack
 *      pointer and jumps to its reset handler.
 * It is built on its own (boot2.ld, no C library), so it must fit in 252 bytes.
 *
 * Register facts: RP2040 datasheet, section 4.10 (SSI) and 2.8.1 (boot sequence); Winbond
 * W25Q-series datasheets for the flash commands.
 */
#include <stdint.h>

#define REG(addr) (*(volatile uint32_t*)(uintptr_t)(addr))

/* Where the boot ROM put us; our stack grows down from just below. */
#define BOOT2_SRAM_BASE 0x20041F00u
#define APP_VECTORS 0x10000100u /* flash + 256: the application's vector table */
#define PPB_VTOR REG(0xE000ED08u)

/* The XIP SSI's registers, through one base pointer (short code: offsets, not addresses). */
#define SSI_BASE 0x18000000u
typedef struct {
  volatile uint32_t ctrlr0; /* 0x00 */
  volatile uint32_t ctrlr1; /* 0x04 */
  volatile uint32_t ssienr; /* 0x08 */
  uint32_t reserved0[2];
  volatile uint32_t baudr; /* 0x14 */
  uint32_t reserved1[4];
  volatile uint32_t sr; /* 0x28 */
  uint32_t reserved2[13];
  volatile uint32_t dr0; /* 0x60 */
  uint32_t reserved3[35];
  volatile uint32_t rx_sample_dly; /* 0xF0 */
  volatile uint32_t spi_ctrlr0;    /* 0xF4 */
} ssi_regs;
typedef char ssi_layout_check[__builtin_offsetof(ssi_regs, spi_ctrlr0) == 0xF4u ? 1 : -1];
#define SSI ((ssi_regs*)(uintptr_t)SSI_BASE)

#define SSI_SR_BUSY (1u << 0)
#define SSI_SR_TFE (1u << 2)
#define SSI_CTRLR0_DFS_32_LSB 16u /* data frame size - 1 */
#define SSI_CTRLR0_TMOD_LSB 8u
#define SSI_CTRLR0_SPI_FRF_LSB 21u
#define SSI_TMOD_TX_AND_RX 0u
#define SSI_TMOD_EEPROM_READ 3u
#define SSI_FRF_QUAD 2u
#define SSI_SPI_TRANS_TYPE_1C2A 1u /* command on one line, address on four */
#define SSI_SPI_TRANS_TYPE_2C2A 2u /* everything on four lines (no command sent) */
#define SSI_SPI_ADDR_L_LSB 2u      /* in 4-bit units */
#define SSI_SPI_INST_L_LSB 8u
#define SSI_SPI_INST_L_NONE 0u
#define SSI_SPI_INST_L_8B 2u
#define SSI_SPI_WAIT_CYCLES_LSB 11u
#define SSI_SPI_XIP_CMD_LSB 24u

#define SSI_CLOCK_DIVIDER 2u /* SCK = clk_sys / 2 (even values only) */
#define SSI_RX_SAMPLE_DELAY 1u
#define FLASH_ADDR_AND_MODE_NIBBLES 8u /* 24 address bits + 8 mode bits, in 4-bit units */
#define FLASH_DUMMY_CLOCKS 4u

#define FLASH_CMD_WRITE_STATUS 0x01u
#define FLASH_CMD_READ_STATUS1 0x05u
#define FLASH_CMD_WRITE_ENABLE 0x06u
#define FLASH_CMD_READ_STATUS2 0x35u
#define FLASH_CMD_QUAD_IO_READ 0xEBu
#define FLASH_MODE_CONTINUOUS 0xA0u
#define FLASH_SR1_BUSY 0x01u
#define FLASH_SR2_QE 0x02u

void boot2_entry(void) __attribute__((naked, noreturn, section(".boot2.entry")));
void boot2_main(void) __attribute__((noreturn, used));

void boot2_entry(void) {
  __asm__ volatile(
      "ldr r0, =%c0\n\t"
      "mov sp, r0\n\t"
      "b boot2_main\n\t"
      ".ltorg\n\t" ::"i"(BOOT2_SRAM_BASE));
}

static __attribute__((noinline)) void ssi_wait_idle(void) {
  while ((SSI->sr & (SSI_SR_TFE | SSI_SR_BUSY)) != SSI_SR_TFE) {
  }
}

/* One command of n (1..3) bytes in standard SPI; returns the byte clocked in last. */
static __attribute__((noinline)) uint32_t flash_command(uint32_t b0, uint32_t b1, uint32_t b2, uint32_t n) {
  SSI->dr0 = b0;
  if (n > 1u) {
    SSI->dr0 = b1;
  }
  if (n > 2u) {
    SSI->dr0 = b2;
  }
  ssi_wait_idle();
  uint32_t last = 0u;
  for (uint32_t i = 0u; i < n; ++i) {
    last = SSI->dr0;
  }
  return last;
}

void boot2_main(void) {
  SSI->ssienr = 0u;
  SSI->baudr = SSI_CLOCK_DIVIDER;
  SSI->rx_sample_dly = SSI_RX_SAMPLE_DELAY;
  SSI->ctrlr0 = (7u << SSI_CTRLR0_DFS_32_LSB) | (SSI_TMOD_TX_AND_RX << SSI_CTRLR0_TMOD_LSB);
  SSI->ssienr = 1u;

  if ((flash_command(FLASH_CMD_READ_STATUS2, 0u, 0u, 2u) & FLASH_SR2_QE) == 0u) {
    (void)flash_command(FLASH_CMD_WRITE_ENABLE, 0u, 0u, 1u);
    (void)flash_command(FLASH_CMD_WRITE_STATUS, 0u, FLASH_SR2_QE, 3u);
    while ((flash_command(FLASH_CMD_READ_STATUS1, 0u, 0u, 2u) & FLASH_SR1_BUSY) != 0u) {
    }
  }

  SSI->ssienr = 0u;
  SSI->ctrlr0 = (SSI_FRF_QUAD << SSI_CTRLR0_SPI_FRF_LSB) | (31u << SSI_CTRLR0_DFS_32_LSB) |
               (SSI_TMOD_EEPROM_READ << SSI_CTRLR0_TMOD_LSB);
  SSI->ctrlr1 = 0u; /* one data frame per transfer */
  SSI->spi_ctrlr0 = (FLASH_ADDR_AND_MODE_NIBBLES << SSI_SPI_ADDR_L_LSB) |
                   (FLASH_DUMMY_CLOCKS << SSI_SPI_WAIT_CYCLES_LSB) |
                   (SSI_SPI_INST_L_8B << SSI_SPI_INST_L_LSB) | SSI_SPI_TRANS_TYPE_1C2A;
  SSI->ssienr = 1u;

  /* Address 0 with the continuous-read mode byte: the flash stays in EBh mode after it. */
  SSI->dr0 = FLASH_CMD_QUAD_IO_READ;
  SSI->dr0 = FLASH_MODE_CONTINUOUS;
  ssi_wait_idle();
  (void)SSI->dr0;

  SSI->ssienr = 0u;
  SSI->spi_ctrlr0 = (FLASH_MODE_CONTINUOUS << SSI_SPI_XIP_CMD_LSB) |
                   (FLASH_ADDR_AND_MODE_NIBBLES << SSI_SPI_ADDR_L_LSB) |
                   (FLASH_DUMMY_CLOCKS << SSI_SPI_WAIT_CYCLES_LSB) |
                   (SSI_SPI_INST_L_NONE << SSI_SPI_INST_L_LSB) | SSI_SPI_TRANS_TYPE_2C2A;
  SSI->ssienr = 1u;

  PPB_VTOR = APP_VECTORS;
  uint32_t stack = REG(APP_VECTORS);
  uint32_t reset = REG(APP_VECTORS + 4u);
  __asm__ volatile("msr msp, %0\n\tbx %1" ::"r"(stack), "r"(reset));
  for (;;) {
  }
}
