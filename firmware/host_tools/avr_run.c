/* avr_run.c - mcutrain's simavr harness: runs an AVR firmware (ELF) on libsimavr and measures it.
 *
 * Build:  gcc -O2 -I/usr/include/simavr avr_run.c -o avr_run -lsimavr -lutil
 *         (Debian/Ubuntu: apt-get install simavr libsimavr-dev)
 * Usage:  avr_run FIRMWARE.elf [mcu=atmega328p] [freq=16000000] [serial=pty|stdio] [eeprom=FILE]
 *                 [ram_floor=ADDR|auto] [max_cycles=N] [cut_after_eeprom_writes=N] [report=FILE] [serve=1]
 *                 [sensor=FILE]
 *
 * What it does (the firmware side is firmware/app/ports/port_simavr.c):
 *  - serial: USART0 is bridged to a pseudo terminal (serial=pty: prints "PTY /dev/pts/N" on stdout,
 *    then serves it) or to stdin/stdout (serial=stdio). Host bytes enter the UART receiver under
 *    simavr's flow control: never more than its FIFO holds (XOFF), more after it drained (XON).
 *    GPIOR2 = 1 from the firmware means "waiting for a byte": the harness then blocks on the host
 *    instead of simulating a busy loop, and answers GPIOR2 = 0xFF once the host has closed the line.
 *    With serve=1 (a pty only) a host that closes the line ends nothing: the harness drops what the
 *    firmware still had for it and waits for the next host, client after client, until a signal
 *    (or the firmware's exit) ends the run.
 *  - markers: GPIOR1 = 2r+1 begins region r, 2r+2 ends it (r = 0..3, not nested); the report has the
 *    exact cycle count of every region (total, pairs, min and max per pair, peak stack inside).
 *  - exit: the firmware writes its exit code to GPIOR0 and sleeps with interrupts off; simavr stops
 *    and that code becomes the harness's exit status.
 *  - EEPROM: loaded from FILE at start (if it exists) and written back whenever the firmware waits
 *    for the host after changing it, and at the end, so saves persist across runs.
 *  - sensor (CAPTURE): with sensor=FILE the firmware reads FILE's bytes, window after window, through the
 *    I/O register at data address 0x49 (I/O 0x29, reserved on the ATmega48-328 and 640-2560, so no
 *    peripheral of simavr or of a real chip answers there). The firmware writes a window's length n,
 *    low byte then high byte; its next read answers 1 when FILE holds n more bytes (the window is taken
 *    from it) and 0 when it does not (the recording ended, or there is no FILE); then n reads give the
 *    window's bytes in order.
 *  - power cut: with cut_after_eeprom_writes=N the run stops right after the N-th EEPROM byte write
 *    (EEPE set in EECR), whatever the firmware was doing; the EEPROM is kept as it then was (exit 86).
 *  - stack: the lowest stack pointer is tracked after every instruction. When the stack writes below
 *    ram_floor (auto: the firmware's __heap_start, the end of its static data), the run stops at once
 *    with a STACK OVERFLOW message and exit status 97.
 * Exit status: the firmware's code; 97 stack overflow; 98 crash; 124 cycle limit; 2 bad usage;
 * 128 + N ended by signal N. With report=FILE a JSON report is written at the end. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "avr_eeprom.h"
#include "avr_uart.h"
#include "sim_avr.h"
#include "sim_elf.h"
#include "sim_io.h"

/* Data-space addresses of the registers used (classic megaAVR: ATmega48/88/168/328, 640/1280/2560). */
#define GPIOR0_ADDR 0x3E
#define GPIOR1_ADDR 0x4A
#define GPIOR2_ADDR 0x4B
#define SENSOR_ADDR 0x49     /* reserved on these MCUs: the sensor's register (see above) */
#define SPL_ADDR 0x5D
#define SPH_ADDR 0x5E
#define SPL_IO 0x3D          /* I/O addresses of SPL and SPH, as the OUT instruction encodes them */
#define SPH_IO 0x3E

#define WAIT_HINT 0x01u
#define HOST_GONE 0xFFu
#define N_REGIONS 4

#define EXIT_USAGE 2
#define EXIT_POWER_CUT 86
#define EECR_ADDR 0x3F       /* EEPROM control register; EEPE (bit 1) starts a write */
#define EEPE_BIT 0x02u
#define EXIT_OVERFLOW 97
#define EXIT_CRASH 98
#define EXIT_CYCLE_LIMIT 124

/* ---- a byte queue ---- */
typedef struct {
    uint8_t *buf;
    size_t cap, head, len;   /* bytes live at buf[(head + i) % cap], i < len */
} queue_t;

static void q_init(queue_t *q, size_t cap) {
    q->buf = malloc(cap);
    if (!q->buf) { perror("avr_run: malloc"); exit(EXIT_USAGE); }
    q->cap = cap;
    q->head = q->len = 0;
}
static int q_put(queue_t *q, uint8_t b) {
    if (q->len == q->cap) return 0;
    q->buf[(q->head + q->len++) % q->cap] = b;
    return 1;
}
static uint8_t q_get(queue_t *q) {
    uint8_t b = q->buf[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return b;
}

/* ---- state ---- */
typedef struct {
    unsigned long long total, pairs, min, max, begin;
    unsigned open;
    unsigned min_sp;         /* lowest SP seen inside the region */
} region_t;

static struct {
    avr_t *avr;
    int fd_in, fd_out, pty;
    char pty_name[128];
    queue_t rx, tx;                  /* host -> firmware, firmware -> host */
    int rx_blocked;                  /* the UART FIFO is full (XOFF) */
    int rx_drained;                  /* the UART FIFO ran empty (XON) since the last byte we fed */
    int host_seen, host_gone;        /* host_gone: no more input will come */
    int out_gone;                    /* the host's side cannot take output any more */
    int serve;                       /* serve=1: a closed line waits for the next host instead of ending */
    int fw_waiting;                  /* the firmware wrote the wait hint */
    unsigned long long rx_bytes, tx_bytes;
    unsigned exit_code;
    region_t region[N_REGIONS];
    unsigned window_min;             /* lowest SP since the last begin marker */
    int bad_markers;
    unsigned min_sp, min_sp_pc, ram_floor;
    unsigned sp_pending, sp_gap;     /* halves of SP written so far by an update in progress (sp_settled) */
    int overflow;
    unsigned long long overflow_cycle;
    unsigned overflow_sp, overflow_pc;
    uint8_t *eeprom;                 /* simavr's EEPROM bytes */
    uint8_t *eeprom_saved;           /* what the file holds */
    unsigned eeprom_size;
    const char *eeprom_path;
    unsigned long long eeprom_writes, cut_after;   /* EEPROM byte writes so far; power cut after that many */
    int cut;
    FILE *sensor;                    /* the recording the sensor plays back (NULL: none) */
    uint8_t *window;                 /* the window being read out */
    unsigned window_len, window_at;  /* its length (being written: len_half) and the next byte */
    int len_half, status_due, ready; /* the high length byte is next; the next read is the status (ready) */
    unsigned long long windows;      /* windows handed out */
    volatile sig_atomic_t signal;
} S;

static void on_signal(int sig) { S.signal = sig; }

static void logger(avr_t *avr, const int level, const char *fmt, va_list ap) {
    (void)avr;
    if (level > LOG_WARNING) return;
    fputs("simavr: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* ---- UART bridge ---- */
static void flush_tx(void);

/* Nobody reads the line: the run's output ends there, or (serve=1) what was pending for the host that left
 * is dropped and later output goes to the next host. */
static void no_listener(void) {
    if (!S.serve) { S.out_gone = 1; return; }
    S.tx.head = 0;
    S.tx.len = 0;
}

static void uart_output(struct avr_irq_t *irq, uint32_t value, void *param) {
    (void)irq; (void)param;
    S.tx_bytes++;
    while (!S.out_gone && !q_put(&S.tx, (uint8_t)value)) {    /* full: wait for the host to read */
        struct pollfd p = {S.fd_out, POLLOUT, 0};
        if (poll(&p, 1, 1000) <= 0 || (p.revents & (POLLERR | POLLHUP))) no_listener();
        else flush_tx();
    }
}

static void uart_xon(struct avr_irq_t *irq, uint32_t value, void *param) {
    (void)irq; (void)param;
    if (value) { S.rx_blocked = 0; S.rx_drained = 1; }
}

static void uart_xoff(struct avr_irq_t *irq, uint32_t value, void *param) {
    (void)irq; (void)param;
    S.rx_blocked = value != 0;
}

/* Write what the host takes now (non-blocking). */
static void flush_tx(void) {
    while (S.tx.len && !S.out_gone) {
        size_t n = S.tx.head + S.tx.len <= S.tx.cap ? S.tx.len : S.tx.cap - S.tx.head;
        ssize_t w = write(S.fd_out, S.tx.buf + S.tx.head, n);
        if (w > 0) { S.tx.head = (S.tx.head + (size_t)w) % S.tx.cap; S.tx.len -= (size_t)w; continue; }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) return;
        no_listener();                                /* EIO / EPIPE: nobody listens any more */
    }
}

/* The host's line is closed (or, on a pty nobody has opened yet, not open: then just wait a little). */
static void host_hangup(void) {
    if (S.serve) {                                    /* wait for the next host (a firmware at work goes on) */
        if (S.host_seen) no_listener();
        S.host_seen = 0;
        if (S.fw_waiting) usleep(20000);
        return;
    }
    if (S.host_seen || !S.pty) S.host_gone = 1;
    else usleep(2000);
    if (S.host_gone && S.pty) S.out_gone = 1;
}

/* Read what the host sent, waiting up to timeout_ms for it (or for room to write, if output is pending). */
static void poll_host(int timeout_ms) {
    struct pollfd p[2] = {{S.fd_in, POLLIN, 0}, {S.fd_out, POLLOUT, 0}};
    int n_fds = S.tx.len && S.fd_out != S.fd_in ? 2 : 1;
    if (S.tx.len && S.fd_out == S.fd_in) p[0].events |= POLLOUT;
    if (poll(p, (nfds_t)n_fds, timeout_ms) <= 0) return;
    flush_tx();
    if (p[0].revents & POLLIN) {
        uint8_t buf[512];
        size_t room = S.rx.cap - S.rx.len;
        ssize_t n = read(S.fd_in, buf, room < sizeof buf ? room : sizeof buf);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++) q_put(&S.rx, buf[i]);
            S.rx_bytes += (unsigned long long)n;
            S.host_seen = 1;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            host_hangup();                            /* EOF, or EIO on a pty whose host closed it */
        }
    } else if (p[0].revents & (POLLHUP | POLLERR)) {
        host_hangup();
    }
}

/* Hand queued host bytes to the UART while its FIFO has room. */
static void feed_uart(void) {
    avr_irq_t *in = avr_io_getirq(S.avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_INPUT);
    while (S.rx.len && !S.rx_blocked) {
        S.rx_drained = 0;
        avr_raise_irq(in, q_get(&S.rx));
    }
}

static void save_eeprom(void);

/* Move bytes both ways. When the firmware waits on a drained line, block (100 ms at a time) until
 * the host sends something; when the host is gone, tell the firmware. */
static void service_io(void) {
    flush_tx();
    int idle = S.fw_waiting && S.rx_drained && S.rx.len == 0;
    if (idle) save_eeprom();                          /* a save may just have finished: persist it */
    if (S.rx.len < S.rx.cap && !S.host_gone) poll_host(idle ? 100 : 0);
    feed_uart();
    if (idle && S.host_gone && S.rx.len == 0) S.avr->data[GPIOR2_ADDR] = HOST_GONE;
    /* still waiting with nothing fed: keep blocking on the next call instead of simulating the spin */
    S.fw_waiting = idle && S.rx_drained && !S.host_gone;
}

/* ---- registers the firmware writes ---- */
static void gpior0_write(avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param) {
    (void)param;
    avr->data[addr] = v;
    S.exit_code = v;
}

static void gpior1_write(avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param) {
    (void)param;
    avr->data[addr] = v;
    unsigned r = (unsigned)(v - 1u) / 2u;
    if (v == 0 || r >= N_REGIONS) { S.bad_markers++; return; }
    region_t *g = &S.region[r];
    if (v & 1u) {                                     /* begin */
        if (g->open) S.bad_markers++;
        g->open = 1;
        g->begin = avr->cycle;
        S.window_min = 0xFFFFu;
    } else if (!g->open) {
        S.bad_markers++;
    } else {                                          /* end */
        unsigned long long c = avr->cycle - g->begin;
        g->open = 0;
        g->total += c;
        if (!g->pairs || c < g->min) g->min = c;
        if (c > g->max) g->max = c;
        g->pairs++;
        if (S.window_min < g->min_sp) g->min_sp = S.window_min;
    }
}

static void gpior2_write(avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param) {
    (void)param;
    avr->data[addr] = v;
    if (v == WAIT_HINT) S.fw_waiting = 1;
}

/* Watches EECR next to simavr's EEPROM module (simavr calls every writer of a register): counts the
 * byte writes and cuts the power after cut_after of them. */
static void eecr_write(avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param) {
    (void)avr; (void)addr; (void)param;
    if (!(v & EEPE_BIT)) return;
    S.eeprom_writes++;
    if (S.cut_after && S.eeprom_writes >= S.cut_after) S.cut = 1;
}

/* The sensor: the firmware writes a window's length (low, high byte); the next read is 1 when the file had that many
 * more bytes, else 0; the reads after a 1 give the window's bytes. */
static void sensor_write(avr_t *avr, avr_io_addr_t addr, uint8_t v, void *param) {
    (void)avr; (void)addr; (void)param;
    if (!S.len_half) {
        S.window_len = v;
        S.len_half = 1;
        return;
    }
    S.window_len |= (unsigned)v << 8;
    S.len_half = 0;
    S.window_at = 0;
    S.status_due = 1;
    S.ready = 0;
    if (!S.sensor) return;
    long at = ftell(S.sensor);
    if (S.window_len && fread(S.window, 1, S.window_len, S.sensor) == S.window_len) {
        S.ready = 1;
        S.windows++;
    } else if (at >= 0) {
        fseek(S.sensor, at, SEEK_SET);               /* no whole window left: it stays so */
    }
}

static uint8_t sensor_read(avr_t *avr, avr_io_addr_t addr, void *param) {
    (void)avr; (void)addr; (void)param;
    if (S.status_due) {
        S.status_due = 0;
        return (uint8_t)S.ready;
    }
    return S.ready && S.window_at < S.window_len ? S.window[S.window_at++] : 0;
}

/* ---- EEPROM file ---- */
static void load_eeprom(void) {
    if (!S.eeprom_path) return;
    FILE *f = fopen(S.eeprom_path, "rb");
    if (f) {
        size_t n = fread(S.eeprom, 1, S.eeprom_size, f);
        fclose(f);
        if (n != S.eeprom_size)
            fprintf(stderr, "avr_run: %s holds %zu bytes, the EEPROM %u; the rest reads as erased\n",
                    S.eeprom_path, n, S.eeprom_size);
    }
    memcpy(S.eeprom_saved, S.eeprom, S.eeprom_size);
}

static void save_eeprom(void) {
    if (!S.eeprom_path || !memcmp(S.eeprom_saved, S.eeprom, S.eeprom_size)) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", S.eeprom_path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = 0;
    if (f) {
        ok = fwrite(S.eeprom, 1, S.eeprom_size, f) == S.eeprom_size && fflush(f) == 0 && fsync(fileno(f)) == 0;
        ok = fclose(f) == 0 && ok;
    }
    if (ok && rename(tmp, S.eeprom_path) == 0) {
        memcpy(S.eeprom_saved, S.eeprom, S.eeprom_size);
    } else {
        fprintf(stderr, "avr_run: cannot write the EEPROM file %s: %s\n", S.eeprom_path, strerror(errno));
        unlink(tmp);
    }
}

/* ---- serial line ---- */
static int open_serial(const char *kind) {
    if (!strcmp(kind, "stdio")) {
        S.fd_in = 0;
        S.fd_out = 1;
        return 0;
    }
    if (strcmp(kind, "pty")) return -1;
    int master, slave;
    struct termios t;
    if (openpty(&master, &slave, S.pty_name, NULL, NULL) < 0) { perror("avr_run: openpty"); return -1; }
    if (tcgetattr(slave, &t) == 0) { cfmakeraw(&t); tcsetattr(slave, TCSANOW, &t); }
    close(slave);                                    /* the host opens it; its close ends the run (not with serve=1) */
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    S.fd_in = S.fd_out = master;
    S.pty = 1;
    printf("PTY %s\n", S.pty_name);
    fflush(stdout);
    return 0;
}

/* Give the host time to read the last bytes before the pty disappears. */
static void drain_serial(void) {
    for (int i = 0; i < 200 && S.tx.len && !S.out_gone; i++) {
        struct pollfd p = {S.fd_out, POLLOUT, 0};
        poll(&p, 1, 10);
        flush_tx();
    }
    if (!S.pty || S.out_gone) return;
    int fd = open(S.pty_name, O_RDONLY | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return;
    /* done when the host's side has held no unread bytes for 20 ms (the pty hands bytes over
     * asynchronously, so one empty look is not enough); at most 2 s */
    for (int i = 0, quiet = 0; i < 400 && quiet < 4; i++) {
        int pending = 0;
        if (ioctl(fd, FIONREAD, &pending) < 0) break;
        quiet = pending ? 0 : quiet + 1;
        usleep(5000);
    }
    close(fd);
}

/* ---- stack ---- */
/* Which halves of the stack pointer the instruction at pc writes with OUT: 1 SPL, 2 SPH, 0 neither. */
static unsigned sp_halves_written(const avr_t *avr, uint32_t pc) {
    if (pc + 1 > avr->flashend) return 0;
    uint16_t op = (uint16_t)(avr->flash[pc] | (avr->flash[pc + 1] << 8));
    if ((op & 0xF800u) != 0xB800u) return 0;
    unsigned io = ((op >> 5) & 0x30u) | (op & 0x0Fu);
    return io == SPL_IO ? 1u : io == SPH_IO ? 2u : 0u;
}

/* Does SP hold a finished value after the instruction at pc? avr-gcc moves the stack pointer with
 * "out SPH, r29; out SREG, r0; out SPL, r28" (interrupts off): in between, SP is half new and half old,
 * which is no real stack use. A lone half write counts as finished three instructions later. */
static int sp_settled(const avr_t *avr, uint32_t pc) {
    unsigned w = sp_halves_written(avr, pc);
    if (w) {
        S.sp_pending |= w;
        S.sp_gap = 0;
        if (S.sp_pending != 3u) return 0;
        S.sp_pending = 0;
        return 1;
    }
    if (!S.sp_pending) return 1;
    if (++S.sp_gap <= 3u) return 0;
    S.sp_pending = 0;
    return 1;
}

static unsigned find_heap_start(const elf_firmware_t *fw) {
#if ELF_SYMBOLS
    for (uint32_t i = 0; i < fw->symbolcount; i++)
        if (fw->symbol[i] && !strcmp(fw->symbol[i]->symbol, "__heap_start"))
            return fw->symbol[i]->addr & 0xFFFFu;
#else
    (void)fw;
#endif
    return 0;
}

/* ---- report ---- */
static void write_report(const char *path, const char *reason, int status, const elf_firmware_t *fw) {
    avr_t *avr = S.avr;
    unsigned peak = S.min_sp <= avr->ramend ? avr->ramend - S.min_sp : 0;
    fprintf(stderr, "avr_run: %s, status %d: cycles=%llu stack_peak=%u B (min SP 0x%04x, RAMEND 0x%04x, "
            "ram_floor 0x%04x) static=%u B",
            reason, status, (unsigned long long)avr->cycle, peak, S.min_sp, avr->ramend, S.ram_floor,
            (unsigned)(fw->datasize + fw->bsssize));
    for (int r = 0; r < N_REGIONS; r++)
        if (S.region[r].pairs)
            fprintf(stderr, " region%d=%llu/%llu", r, S.region[r].total, S.region[r].pairs);
    fputc('\n', stderr);
    if (!path) return;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) { fprintf(stderr, "avr_run: cannot write %s: %s\n", path, strerror(errno)); return; }
    fprintf(f, "{\n  \"reason\": \"%s\",\n  \"status\": %d,\n  \"exit_code\": %u,\n", reason, status, S.exit_code);
    fprintf(f, "  \"mcu\": \"%s\",\n  \"frequency\": %u,\n  \"cycles\": %llu,\n", avr->mmcu, avr->frequency,
            (unsigned long long)avr->cycle);
    fprintf(f, "  \"ramend\": %u,\n  \"ram_floor\": %u,\n  \"min_sp\": %u,\n  \"min_sp_pc\": %u,\n"
            "  \"stack_peak\": %u,\n", avr->ramend, S.ram_floor, S.min_sp, S.min_sp_pc, peak);
    fprintf(f, "  \"eeprom_writes\": %llu,\n  \"sensor_windows\": %llu,\n", S.eeprom_writes, S.windows);
    fprintf(f, "  \"data_size\": %u,\n  \"bss_size\": %u,\n  \"flash_used\": %u,\n", (unsigned)fw->datasize,
            (unsigned)fw->bsssize, (unsigned)fw->flashsize);
    if (S.overflow)
        fprintf(f, "  \"overflow\": {\"sp\": %u, \"pc\": %u, \"cycle\": %llu, \"below_floor\": %u},\n",
                S.overflow_sp, S.overflow_pc, S.overflow_cycle, S.ram_floor - (S.overflow_sp + 1u));
    else
        fprintf(f, "  \"overflow\": null,\n");
    fprintf(f, "  \"regions\": [");
    for (int r = 0; r < N_REGIONS; r++) {
        region_t *g = &S.region[r];
        fprintf(f, "%s\n    {\"region\": %d, \"pairs\": %llu, \"total\": %llu, \"min\": %llu, \"max\": %llu, "
                "\"stack_peak\": %u, \"open\": %u}", r ? "," : "", r, g->pairs, g->total, g->min, g->max,
                g->pairs && g->min_sp <= avr->ramend ? avr->ramend - g->min_sp : 0, g->open);
    }
    fprintf(f, "\n  ],\n  \"bad_markers\": %d,\n  \"uart_rx\": %llu,\n  \"uart_tx\": %llu\n}\n", S.bad_markers,
            S.rx_bytes, S.tx_bytes);
    int ok = fflush(f) == 0;
    fclose(f);
    if (!ok || rename(tmp, path)) { fprintf(stderr, "avr_run: cannot write %s\n", path); unlink(tmp); }
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s FIRMWARE.elf [mcu=atmega328p] [freq=16000000] [serial=pty|stdio] [eeprom=FILE]\n"
                    "       [ram_floor=ADDR|auto] [max_cycles=N] [cut_after_eeprom_writes=N] [report=FILE] [serve=1]\n"
                    "       [sensor=FILE]\n", argv0);
}

int main(int argc, char **argv) {
    const char *mcu = "atmega328p", *serial = "pty", *report = NULL, *floor_arg = "auto";
    unsigned long freq = 16000000UL;
    unsigned long long max_cycles = 0;
    if (argc < 2 || argv[1][0] == '-') { usage(argv[0]); return EXIT_USAGE; }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = strchr(a, '=');
        if (!v) { usage(argv[0]); return EXIT_USAGE; }
        v++;
        if (!strncmp(a, "mcu=", 4)) mcu = v;
        else if (!strncmp(a, "freq=", 5)) freq = strtoul(v, NULL, 0);
        else if (!strncmp(a, "serial=", 7)) serial = v;
        else if (!strncmp(a, "eeprom=", 7)) S.eeprom_path = v;
        else if (!strncmp(a, "ram_floor=", 10)) floor_arg = v;
        else if (!strncmp(a, "max_cycles=", 11)) max_cycles = strtoull(v, NULL, 0);
        else if (!strncmp(a, "cut_after_eeprom_writes=", 24)) S.cut_after = strtoull(v, NULL, 0);
        else if (!strncmp(a, "report=", 7)) report = v;
        else if (!strncmp(a, "serve=", 6)) S.serve = atoi(v) != 0;
        else if (!strncmp(a, "sensor=", 7)) {
            S.sensor = fopen(v, "rb");
            if (!S.sensor) { fprintf(stderr, "avr_run: cannot read the sensor file %s: %s\n", v, strerror(errno)); return EXIT_USAGE; }
        }
        else { usage(argv[0]); return EXIT_USAGE; }
    }

    avr_global_logger_set(logger);
    elf_firmware_t fw;
    memset(&fw, 0, sizeof fw);
    if (elf_read_firmware(argv[1], &fw)) { fprintf(stderr, "avr_run: cannot read %s\n", argv[1]); return EXIT_USAGE; }
    avr_t *avr = avr_make_mcu_by_name(mcu);
    if (!avr) { fprintf(stderr, "avr_run: simavr does not know the MCU %s\n", mcu); return EXIT_USAGE; }
    S.avr = avr;
    avr_init(avr);
    avr->log = LOG_WARNING;
    fw.frequency = (uint32_t)freq;
    avr_load_firmware(avr, &fw);
    avr->frequency = (uint32_t)freq;

    S.ram_floor = strcmp(floor_arg, "auto") ? (unsigned)strtoul(floor_arg, NULL, 0) : find_heap_start(&fw);
    if (!S.ram_floor) S.ram_floor = (unsigned)(avr->ioend + 1u + fw.datasize + fw.bsssize);
    S.min_sp = 0xFFFFu;
    for (int r = 0; r < N_REGIONS; r++) S.region[r].min_sp = 0xFFFFu;

    /* UART0: raw bytes, no console echo and no sleeping in polling loops; flow-controlled input */
    uint32_t flags = 0;
    avr_ioctl(avr, AVR_IOCTL_UART_GET_FLAGS('0'), &flags);
    flags &= ~(uint32_t)(AVR_UART_FLAG_STDIO | AVR_UART_FLAG_POLL_SLEEP);
    avr_ioctl(avr, AVR_IOCTL_UART_SET_FLAGS('0'), &flags);
    avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUTPUT), uart_output, NULL);
    avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUT_XON), uart_xon, NULL);
    avr_irq_register_notify(avr_io_getirq(avr, AVR_IOCTL_UART_GETIRQ('0'), UART_IRQ_OUT_XOFF), uart_xoff, NULL);
    S.rx_blocked = 1;                                 /* until the firmware enables its receiver */
    avr_register_io_write(avr, GPIOR0_ADDR, gpior0_write, NULL);
    avr_register_io_write(avr, GPIOR1_ADDR, gpior1_write, NULL);
    avr_register_io_write(avr, GPIOR2_ADDR, gpior2_write, NULL);
    avr_register_io_write(avr, EECR_ADDR, eecr_write, NULL);
    avr_register_io_write(avr, SENSOR_ADDR, sensor_write, NULL);
    avr_register_io_read(avr, SENSOR_ADDR, sensor_read, NULL);
    S.window = malloc(0x10000u);                      /* the longest window a 16-bit length gives */
    if (!S.window) return EXIT_USAGE;

    /* EEPROM: simavr hands out its buffer for a zero-length GET without a destination */
    avr_eeprom_desc_t ee = {.ee = NULL, .offset = 0, .size = 0};
    avr_ioctl(avr, AVR_IOCTL_EEPROM_GET, &ee);
    S.eeprom = ee.ee;
    S.eeprom_size = avr->e2end + 1u;
    if (!S.eeprom) { fprintf(stderr, "avr_run: %s has no EEPROM in simavr\n", mcu); S.eeprom_path = NULL; }
    else {
        S.eeprom_saved = malloc(S.eeprom_size);
        if (!S.eeprom_saved) return EXIT_USAGE;
        load_eeprom();
    }

    q_init(&S.rx, 4096);
    q_init(&S.tx, 65536);
    if (open_serial(serial)) { fprintf(stderr, "avr_run: serial must be pty or stdio\n"); return EXIT_USAGE; }
    if (S.serve && !S.pty) { fprintf(stderr, "avr_run: serve=1 needs serial=pty\n"); return EXIT_USAGE; }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    int state = cpu_Running;
    unsigned long long n = 0;
    const char *reason = "exit";
    for (;;) {
        uint32_t pc = avr->pc;
        state = avr_run(avr);
        unsigned sp = avr->data[SPL_ADDR] | (avr->data[SPH_ADDR] << 8);
        if (sp_settled(avr, pc) && (sp < S.window_min || sp < S.min_sp)) {
            if (sp < S.window_min) S.window_min = sp;
            if (sp < S.min_sp) {
                S.min_sp = sp;
                S.min_sp_pc = pc;
                if (sp + 1u < S.ram_floor) {              /* the stack wrote below its floor */
                    S.overflow = 1;
                    S.overflow_sp = sp;
                    S.overflow_pc = pc;
                    S.overflow_cycle = avr->cycle;
                    reason = "stack_overflow";
                    break;
                }
            }
        }
        if (state == cpu_Done || state == cpu_Crashed) { reason = state == cpu_Done ? "exit" : "crash"; break; }
        if (max_cycles && avr->cycle >= max_cycles) { reason = "cycle_limit"; break; }
        if (S.cut) { reason = "power_cut"; break; }
        if (S.signal) { reason = "signal"; break; }
        if (S.fw_waiting || (++n & 4095u) == 0) service_io();
    }

    int status;
    if (S.overflow) {
        status = EXIT_OVERFLOW;
        fprintf(stderr, "STACK OVERFLOW: SP reached 0x%04x at PC 0x%04x (cycle %llu): the stack wrote %u B below "
                "ram_floor 0x%04x (the end of .data + .bss, %u B static); RAM ends at 0x%04x, so the stack had %u B\n",
                S.overflow_sp, S.overflow_pc, S.overflow_cycle, S.ram_floor - (S.overflow_sp + 1u), S.ram_floor,
                (unsigned)(fw.datasize + fw.bsssize), avr->ramend, avr->ramend + 1u - S.ram_floor);
    } else if (!strcmp(reason, "crash")) {
        status = EXIT_CRASH;
        fprintf(stderr, "avr_run: the firmware crashed at PC 0x%04x\n", avr->pc);
    } else if (!strcmp(reason, "cycle_limit")) {
        status = EXIT_CYCLE_LIMIT;
        fprintf(stderr, "avr_run: cycle limit %llu reached\n", max_cycles);
    } else if (!strcmp(reason, "power_cut")) {
        status = EXIT_POWER_CUT;
        fprintf(stderr, "avr_run: power cut after %llu EEPROM writes\n", S.eeprom_writes);
    } else if (!strcmp(reason, "signal")) {
        status = 128 + S.signal;
    } else {
        status = (int)S.exit_code;
    }
    save_eeprom();
    write_report(report, reason, status, &fw);
    drain_serial();
    return status;
}
