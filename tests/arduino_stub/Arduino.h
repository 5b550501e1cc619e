/* A minimal stand-in for the Arduino API, for compiling and running mcutrain's Arduino port on the
 * host in tests (the real framework is downloaded by PlatformIO and cannot be used offline). Serial
 * is stdin/stdout; only what the port uses exists. */
#ifndef MCT_TEST_ARDUINO_H
#define MCT_TEST_ARDUINO_H

#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define RAMEND 0x8FF

class HardwareSerial {
public:
    void begin(unsigned long) {}
    explicit operator bool() const { return true; }
    /* Bytes waiting on stdin (0 or 1 is enough for the port); the program ends when stdin closes. */
    int available() {
        if (have_) return 1;
        struct pollfd p = {0, POLLIN, 0};
        if (poll(&p, 1, 10) <= 0) return 0;
        ssize_t n = ::read(0, &byte_, 1);
        if (n <= 0) exit(0);
        have_ = true;
        return 1;
    }
    int read() {
        if (!available()) return -1;
        have_ = false;
        return byte_;
    }
    size_t write(const uint8_t *p, size_t n) {
        size_t done = 0;
        while (done < n) {
            ssize_t w = ::write(1, p + done, n - done);
            if (w <= 0) exit(0);
            done += (size_t)w;
        }
        return n;
    }
    void flush() {}

private:
    bool have_ = false;
    uint8_t byte_ = 0;
};

extern HardwareSerial Serial;

#endif
