/* port_arduino.cpp - real boards with the Arduino framework (the env of the board in platformio.ini):
 * the protocol runs on Serial at 115200 baud, saves go to EEPROM where the core has an EEPROM
 * library (AVR, STM32, Teensy: direct; ESP32 and RP2040: flash-emulated, begin() and commit()), and
 * setup()/loop() take the place of main(). Boards without EEPROM.h report no storage (SAVE answers
 * "not supported"). MCT_STORE_BYTES (from the board file) caps the storage used.
 * MCT_LIBRARY (a library export, see mcutrain.h): only the storage is used; setup()/loop() are the sketch's.
 * MCT_SIM_HINTS (AVR in mcutrain's simavr harness, the genuine Arduino core): the same Serial and EEPROM,
 * plus the harness's registers: the wait hint while no byte is in, the exit code and the cycle markers. */
#ifdef MCT_PORT_ARDUINO
#include <Arduino.h>

#if defined(__has_include)
#if __has_include(<EEPROM.h>)
#include <EEPROM.h>
#define MCT_HAVE_EEPROM 1
#endif
#endif
#if defined(ESP32) || defined(ESP8266) || defined(ARDUINO_ARCH_RP2040)
#define MCT_EEPROM_NEEDS_COMMIT 1
#endif
#ifndef MCT_STORE_BYTES
#define MCT_STORE_BYTES 1024
#endif

extern "C" {
#include "../mct_app.h"
#include "../mct_port.h"
}

#if !defined(PIO_UNIT_TESTING) && !defined(MCT_LIBRARY)   /* `pio test`: setup() is test/test_model/arduino_glue.cpp's */
static mct_app app;

void setup() {
    mct_stack_paint();
    port_init();
    mct_app_init(&app);
}

void loop() {
    mct_app_poll(&app);
}
#endif

extern "C" {

void port_init(void) {
    Serial.begin(115200);
    while (!Serial) {          /* boards with native USB: wait for the host to open the port */
    }
#if defined(MCT_HAVE_EEPROM) && defined(MCT_EEPROM_NEEDS_COMMIT)
    EEPROM.begin(MCT_STORE_BYTES);
#endif
}

int port_getc(void) {
#if defined(MCT_SIM_HINTS) && defined(__AVR__)
    /* The hint lets the harness stop simulating until the host sends more, so it comes only after a few byte
     * times of waiting: a byte still on its way through the USART (its RX interrupt not yet due) gets in. */
    uint16_t spins = 0;
    while (Serial.available() <= 0) {
        if (spins < 1000u) { spins++; continue; }
        GPIOR2 = 0x01;                     /* waiting: the harness may block on the host */
        if (GPIOR2 == 0xFF) return -1;     /* the host is gone */
    }
#else
    while (Serial.available() <= 0) {
    }
#endif
    return Serial.read();
}

void port_write(const uint8_t *p, uint16_t n) { Serial.write(p, n); }

void port_flush(void) { Serial.flush(); }

uint32_t port_store_size(void) {
#ifdef MCT_HAVE_EEPROM
#if defined(MCT_LIBRARY) && defined(MCT_EEPROM_NEEDS_COMMIT)
    static bool begun = false;             /* a library has no port_init: open the emulated EEPROM on first use */
    if (!begun) begun = EEPROM.begin(MCT_STORE_BYTES);
#endif
    uint32_t n = (uint32_t)EEPROM.length();
    return n < (uint32_t)MCT_STORE_BYTES ? n : (uint32_t)MCT_STORE_BYTES;
#else
    return 0;
#endif
}

int port_store_read(uint32_t off, void *dst, uint32_t n) {
#ifdef MCT_HAVE_EEPROM
    uint8_t *d = (uint8_t *)dst;
    for (uint32_t i = 0; i < n; i++) d[i] = EEPROM.read((int)(off + i));
    return 0;
#else
    (void)off; (void)dst; (void)n;
    return 1;
#endif
}

int port_store_write(uint32_t off, const void *src, uint32_t n) {
#ifdef MCT_HAVE_EEPROM
    const uint8_t *s = (const uint8_t *)src;
    for (uint32_t i = 0; i < n; i++)
        if (EEPROM.read((int)(off + i)) != s[i]) EEPROM.write((int)(off + i), s[i]);   /* spare the cells */
#ifdef MCT_EEPROM_NEEDS_COMMIT
    return EEPROM.commit() ? 0 : 1;
#else
    return 0;
#endif
#else
    (void)off; (void)src; (void)n;
    return 1;
#endif
}

#if defined(MCT_SIM_HINTS) && defined(__AVR__)
void port_exit(int code) {                 /* the exit code to the harness, then sleep with interrupts off */
    Serial.flush();
    GPIOR0 = (uint8_t)code;
    cli();
    SMCR = (uint8_t)((1 << SM1) | (1 << SE));
    for (;;) __asm__ volatile("sleep");
}

void port_mark(uint8_t region, uint8_t begin) { GPIOR1 = (uint8_t)(2u * region + (begin ? 1u : 2u)); }
#else
void port_exit(int code) { (void)code; }    /* a board runs until it is reset */

void port_mark(uint8_t region, uint8_t begin) { (void)region; (void)begin; }
#endif

/* The sensor of CAPTURE: a sketch that samples a microphone or an IMU defines its own port_sensor_read (filling
 * the window it has ready and returning 1); without one, CAPTURE answers NO_WINDOW. */
__attribute__((weak)) int port_sensor_read(void *dst, uint32_t n) {
    (void)dst; (void)n;
    return 0;
}

int port_stack_bounds(uint8_t **lo, uint8_t **hi) {
#if defined(__AVR__)
    extern char __heap_start;
    *lo = (uint8_t *)&__heap_start;     /* no malloc in mcutrain: everything above .bss is the stack's */
    *hi = (uint8_t *)(RAMEND + 1);
    return 1;
#else
    (void)lo; (void)hi;
    return 0;
#endif
}

}  /* extern "C" */

#endif /* MCT_PORT_ARDUINO */

/* Keeps the file a valid translation unit in builds for other ports. */
typedef int mct_port_arduino_unit;
