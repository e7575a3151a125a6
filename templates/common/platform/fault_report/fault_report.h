/*
 * microtvm-gen board ports under QEMU: what a fault report needs, for the ports whose
 * port.toml names the fault_report layer.
 *
 *   - a private stack (mtvg_fault_stack, MTVG_FAULT_STACK_SIZE bytes from port.h) that the
 *     port's fault entry switches to, so that a stack overflow can still be reported;
 *   - the one-line text of the report, built without printf (the C library may be the
 *     culprit) in a buffer the port owns.
 *
 * The port writes the line to its console and ends the program with MTVG_FAULT_EXIT_BASE +
 * the exception's number.
 */
#ifndef MTVG_FAULT_REPORT_H_
#define MTVG_FAULT_REPORT_H_

#include <stddef.h>
#include <stdint.h>

#include "mtvg/status.h"

/* Exit status of a fatal exception: this base plus the exception number (or trap cause). */
#ifndef MTVG_FAULT_EXIT_BASE
#define MTVG_FAULT_EXIT_BASE MTVG_EXIT_FAULT_BASE /* mtvg/status.h */
#endif

/* The fault stack and its end as an assembler operand, for a port's fault entry: the
 * including file has included port.h, which sizes it (MTVG_FAULT_STACK_SIZE). */
#define MTVG_FAULT_STACK_ALIGN 16 /* the AAPCS asks for 8, the RISC-V psABI for 16 */
#define MTVG_FAULT_STRINGIFY_(x) #x
#define MTVG_FAULT_STRINGIFY(x) MTVG_FAULT_STRINGIFY_(x)
#define MTVG_FAULT_STACK_TOP_ASM \
  "(mtvg_fault_stack + " MTVG_FAULT_STRINGIFY(MTVG_FAULT_STACK_SIZE) ")"
extern uint8_t mtvg_fault_stack[];

/* A bounded text: what does not fit is cut, and text[] always ends with a NUL. */
typedef struct {
  char* text;
  size_t size; /* bytes of text[], the NUL included */
  size_t len;
} mtvg_fault_msg;

/* Appends s. */
void mtvg_fault_put(mtvg_fault_msg* m, const char* s);

/* Appends label, then value as 0x and eight lower-case hex digits. */
void mtvg_fault_hex(mtvg_fault_msg* m, const char* label, uint32_t value);

/* Appends value in decimal. */
void mtvg_fault_dec(mtvg_fault_msg* m, uint32_t value);

#endif /* MTVG_FAULT_REPORT_H_ */
