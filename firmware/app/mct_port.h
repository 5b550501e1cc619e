/* mct_port.h - what the firmware needs from a target: a byte stream to the host, optional
 * persistent storage, measurement markers and the stack bounds. One file in ports/ implements
 * it per target family; platformio.ini picks the file with build_src_filter. */
#ifndef MCT_PORT_H
#define MCT_PORT_H

#include <stdint.h>

/* Set up the serial line (and whatever else the target needs). */
void port_init(void);
/* Next byte from the host, blocking; -1 when the host is gone for good (native and simulators). */
int port_getc(void);
/* Send bytes to the host. */
void port_write(const uint8_t *p, uint16_t n);
/* Push buffered output out. */
void port_flush(void);
/* Bytes of persistent storage for saves (0: none). */
uint32_t port_store_size(void);
/* Read n bytes of persistent storage at off; 0 on success. */
int port_store_read(uint32_t off, void *dst, uint32_t n);
/* Write n bytes of persistent storage at off; 0 on success. */
int port_store_write(uint32_t off, const void *src, uint32_t n);
/* End the program with an exit code (native and simulator builds; a no-op on boards). */
void port_exit(int code);
/* Measurement marker: region 0 = inference, 1 = training step; begin = 1 at the start, 0 at the end. */
void port_mark(uint8_t region, uint8_t begin);
/* The RAM the stack may grow into: [*lo, *hi); 0 when the target cannot tell. */
int port_stack_bounds(uint8_t **lo, uint8_t **hi);

/* Fill dst with the sensor's next raw window of n bytes (CAPTURE; builds with a feature pipeline only): 1 when
 * one was ready, 0 when none is (the simulators read a host file; a board's sketch provides the samples). */
int port_sensor_read(void *dst, uint32_t n);

#endif /* MCT_PORT_H */
