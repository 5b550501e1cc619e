/* port_posix.c - the native build: the host side of the serial line is stdin/stdout, or a pty when
 * the program runs with --pty (it prints "PTY /dev/pts/N" and serves that terminal, client after
 * client, until QUIT or a signal ends it). Saves go to a
 * file: $MCUTRAIN_STORE, else mcutrain_store.bin in the working directory. For tests of power cuts,
 * $MCUTRAIN_STORE_FAIL_AFTER=N ends the program abruptly after N bytes of a save were written. The sensor
 * (CAPTURE) is the file $MCUTRAIN_SENSOR: raw windows one after another, read in order; none when it ends. */
#ifdef MCT_PORT_POSIX
#define _XOPEN_SOURCE 600
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "mct_port.h"

#define STORE_BYTES (64u * 1024u)

static int fd_in = 0, fd_out = 1, pty_mode = 0;
static long fail_after = -1;
static long sensor_at = 0;        /* the byte offset of the sensor file's next window */

/* Open a pty master in raw mode, print the slave's name, and serve it. */
static void open_pty(void) {
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) || unlockpt(m)) { perror("pty"); exit(2); }
    struct termios t;
    if (tcgetattr(m, &t) == 0) { cfmakeraw(&t); tcsetattr(m, TCSANOW, &t); }
    printf("PTY %s\n", ptsname(m));
    fflush(stdout);
    fd_in = fd_out = m;
    pty_mode = 1;
}

extern int mct_posix_argc;
extern char **mct_posix_argv;

void port_init(void) {
    const char *f = getenv("MCUTRAIN_STORE_FAIL_AFTER");
    if (f) fail_after = atol(f);
    for (int i = 1; i < mct_posix_argc; i++)
        if (!strcmp(mct_posix_argv[i], "--pty")) open_pty();
}

int port_getc(void) {
    unsigned char c;
    for (;;) {
        ssize_t n = read(fd_in, &c, 1);
        if (n == 1) return c;
        if (n < 0 && errno == EINTR) continue;
        if (pty_mode && n < 0 && errno == EIO) {   /* no client has the pty open: wait for the next one */
            usleep(20000);
            continue;
        }
        return -1;                 /* stdin closed: the host is gone */
    }
}

void port_write(const uint8_t *p, uint16_t n) {
    while (n) {
        ssize_t w = write(fd_out, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (pty_mode && w < 0 && errno == EIO) return;   /* the client left: the next one gets the next reply */
        if (w <= 0) exit(0);       /* nobody listens any more */
        p += w;
        n = (uint16_t)(n - w);
    }
}

void port_flush(void) {}

static const char *store_path(void) {
    const char *p = getenv("MCUTRAIN_STORE");
    return p && *p ? p : "mcutrain_store.bin";
}

uint32_t port_store_size(void) { return STORE_BYTES; }

int port_store_read(uint32_t off, void *dst, uint32_t n) {
    memset(dst, 0xFF, n);                       /* erased storage reads as 0xFF */
    FILE *f = fopen(store_path(), "rb");
    if (!f) return 0;
    if (fseek(f, (long)off, SEEK_SET) == 0) (void)fread(dst, 1, n, f);
    fclose(f);
    return 0;
}

int port_store_write(uint32_t off, const void *src, uint32_t n) {
    FILE *f = fopen(store_path(), "r+b");
    if (!f) f = fopen(store_path(), "w+b");
    if (!f) return 1;
    if (fseek(f, (long)off, SEEK_SET)) { fclose(f); return 1; }
    const uint8_t *p = (const uint8_t *)src;
    for (uint32_t i = 0; i < n; i++) {
        if (fail_after == 0) { fflush(f); _exit(86); }   /* simulated power cut */
        if (fail_after > 0) fail_after--;
        if (fputc(p[i], f) == EOF) { fclose(f); return 1; }
    }
    int rc = fflush(f) != 0;
    fsync(fileno(f));
    fclose(f);
    return rc;
}

int port_sensor_read(void *dst, uint32_t n) {
    const char *p = getenv("MCUTRAIN_SENSOR");
    FILE *f = p && *p ? fopen(p, "rb") : NULL;
    if (!f) return 0;
    size_t got = fseek(f, sensor_at, SEEK_SET) == 0 ? fread(dst, 1, n, f) : 0;
    fclose(f);
    if (got != n) return 0;       /* the recording has no whole window left */
    sensor_at += (long)n;
    return 1;
}

void port_exit(int code) {
    usleep(50000);       /* let the host read the last reply before the pty goes away */
    exit(code);
}

void port_mark(uint8_t region, uint8_t begin) { (void)region; (void)begin; }

int port_stack_bounds(uint8_t **lo, uint8_t **hi) { (void)lo; (void)hi; return 0; }

#endif /* MCT_PORT_POSIX */

/* Keeps the file a valid translation unit (ISO C) in builds for other ports. */
typedef int mct_port_posix_unit;
