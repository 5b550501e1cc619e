/* port_simavr.c - ATmega328P (and other classic megaAVR) firmware run under simavr by mcutrain's
 * harness (firmware/host_tools/avr_run.c); the same code works on a real chip.
 *
 *  - serial: USART0, polled, 8N1 at 1 Mbit/s (U2X, UBRR = 1 at 16 MHz). The harness paces the host's
 *    bytes into the receiver with simavr's XON/XOFF flow control and sends every transmitted byte to
 *    the host.
 *  - saves: the chip's EEPROM (E2END + 1 bytes, 1 KB on the ATmega328P) through avr/eeprom.h;
 *    eeprom_update_block only rewrites bytes that change.
 *  - measurement markers: writes to GPIOR1, 2 * region + 1 at the start and 2 * region + 2 at the end
 *    (1/2: inference, 3/4: training step); the harness counts the exact cycles between them.
 *  - waiting for the host: GPIOR2 = 1 before polling an empty receiver, so the harness may block
 *    until the host sends something; the harness answers 0xFF in GPIOR2 when the host is gone.
 *  - sensor (CAPTURE): the I/O register at data address 0x49 (reserved on these chips): the firmware writes a
 *    window's length (low byte, high byte), reads 1 when the harness's recording holds a whole window (0: it
 *    ended, or no recording), then reads the window byte after byte. On a real chip nothing answers there
 *    (reads give 0), so CAPTURE answers NO_WINDOW.
 *  - exit: the code goes to GPIOR0, then the CPU sleeps with interrupts off, which ends simavr.
 *  - stack: from __heap_start (the end of .data/.bss; nothing uses malloc) to RAMEND. */
#ifdef MCT_PORT_SIMAVR
#include <avr/eeprom.h>
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>

#include "mct_port.h"

#ifndef F_CPU
#define F_CPU 16000000UL
#endif
#ifndef MCT_SIMAVR_BAUD
#define MCT_SIMAVR_BAUD 1000000UL
#endif

#define WAIT_HINT 0x01u      /* GPIOR2: the firmware waits for a byte */
#define HOST_GONE 0xFFu      /* GPIOR2, set by the harness: no more bytes will come */
#define SENSOR _SFR_IO8(0x29)  /* data address 0x49, reserved: the harness's sensor register */

void port_init(void) {
    UCSR0A = _BV(U2X0);
    UBRR0 = (uint16_t)((F_CPU + 4UL * MCT_SIMAVR_BAUD) / (8UL * MCT_SIMAVR_BAUD) - 1UL);
    UCSR0C = _BV(UCSZ01) | _BV(UCSZ00);   /* 8 data bits, no parity, 1 stop bit */
    UCSR0B = _BV(RXEN0) | _BV(TXEN0);
    GPIOR2 = 0;
}

int port_getc(void) {
    if (!(UCSR0A & _BV(RXC0))) {
        GPIOR2 = WAIT_HINT;
        while (!(UCSR0A & _BV(RXC0)))
            if (GPIOR2 == HOST_GONE) return -1;
    }
    return UDR0;
}

void port_write(const uint8_t *p, uint16_t n) {
    while (n--) {
        loop_until_bit_is_set(UCSR0A, UDRE0);
        UDR0 = *p++;
    }
}

void port_flush(void) { loop_until_bit_is_set(UCSR0A, UDRE0); }

/* The EEPROM, or the part of it the board file gives (MCT_STORE_BYTES: the real board's storage). */
#if defined(MCT_STORE_BYTES) && MCT_STORE_BYTES < E2END + 1UL
#define STORE_BYTES ((uint32_t)MCT_STORE_BYTES)
#else
#define STORE_BYTES ((uint32_t)E2END + 1u)
#endif

uint32_t port_store_size(void) { return STORE_BYTES; }

int port_store_read(uint32_t off, void *dst, uint32_t n) {
    if (off > STORE_BYTES || n > STORE_BYTES - off) return 1;
    eeprom_read_block(dst, (const void *)(uint16_t)off, (size_t)n);
    return 0;
}

int port_store_write(uint32_t off, const void *src, uint32_t n) {
    if (off > STORE_BYTES || n > STORE_BYTES - off) return 1;
    eeprom_update_block(src, (void *)(uint16_t)off, (size_t)n);
    return 0;
}

void port_exit(int code) {
    port_flush();
    GPIOR0 = (uint8_t)code;
    cli();
    set_sleep_mode(SLEEP_MODE_PWR_DOWN);
    sleep_enable();
    for (;;) sleep_cpu();   /* simavr: "sleeping with interrupts off", the run ends */
}

void port_mark(uint8_t region, uint8_t begin) { GPIOR1 = (uint8_t)(2u * region + (begin ? 1u : 2u)); }

int port_sensor_read(void *dst, uint32_t n) {
    if (n > 0xFFFFu) return 0;
    SENSOR = (uint8_t)n;
    SENSOR = (uint8_t)(n >> 8);
    if (SENSOR != 1u) return 0;
    uint8_t *d = (uint8_t *)dst;
    for (uint16_t i = (uint16_t)n; i; i--) *d++ = SENSOR;
    return 1;
}

int port_stack_bounds(uint8_t **lo, uint8_t **hi) {
    extern uint8_t __heap_start;
    *lo = &__heap_start;
    *hi = (uint8_t *)RAMEND + 1;
    return 1;
}

/* A return from main or a call of exit() runs the .fini sections with the exit code in r24: hand it to
 * the harness the same way as port_exit. */
__attribute__((naked, used, section(".fini1"))) static void port_fini(void) {
    __asm__ volatile("out %0, r24" ::"I"(_SFR_IO_ADDR(GPIOR0)));
    cli();
    set_sleep_mode(SLEEP_MODE_PWR_DOWN);
    sleep_enable();
    sleep_cpu();
}

#endif /* MCT_PORT_SIMAVR */

/* Keeps the file a valid translation unit (ISO C) in builds for other ports. */
typedef int mct_port_simavr_unit;
