/* fuzz_frames.c - libFuzzer harness of the firmware's frame handling (firmware/app/mct_protocol.c), built by
 * bench/fuzz.py with an exported project's model.c/model.h, the project's app sources and the C core, under
 * -fsanitize=fuzzer,address,undefined.
 *
 * Each input is the byte stream the host sends. The harness stands in for a target port (mct_port.h): bytes
 * come from the input, replies go to a buffer, saves to RAM. Frame by frame (one mct_app_poll each) it checks:
 *   - nothing crashes, reads or writes out of bounds, or hits undefined behaviour (the sanitizers);
 *   - every reply is one well-formed frame: sync byte, the command with bit 7 set, a length that matches,
 *     a CRC-16 that matches;
 *   - the parameters, the optimizer state and the train state are bit for bit as before, unless the reply
 *     says OK to a command that changes them (TRAIN, WRITE, LOAD, RESET): a malformed frame, a frame cut
 *     short by the end of the input, or one refused with an error status changes no weight.
 * A violated check aborts (libFuzzer reports it as a crash and keeps the input).
 *
 * A custom mutator makes libFuzzer's mutations reach past the CRC check: after each mutation it recomputes the
 * CRC of every complete frame in the input, except in one mutation of eight (so bad CRCs are fuzzed too). */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mct_app.h"
#include "mct_crc.h"
#include "mct_port.h"

#define STORE_BYTES (64u * 1024u)
#define REPLY_MAX (1u << 16)

static const uint8_t *in_data;
static size_t in_len, in_pos;
static uint8_t reply[REPLY_MAX];
static size_t reply_len;
static uint8_t store[STORE_BYTES];
static jmp_buf at_end;
static mct_app app;
static mct_app before;

void port_init(void) {}
int port_getc(void) { return in_pos < in_len ? in_data[in_pos++] : -1; }
void port_write(const uint8_t *p, uint16_t n) {
    if (reply_len + n > REPLY_MAX) { fprintf(stderr, "reply longer than %u bytes\n", REPLY_MAX); abort(); }
    memcpy(reply + reply_len, p, n);
    reply_len += n;
}
void port_flush(void) {}
uint32_t port_store_size(void) { return STORE_BYTES; }
int port_store_read(uint32_t off, void *dst, uint32_t n) {
    if (off > STORE_BYTES || n > STORE_BYTES - off) return 1;
    memcpy(dst, store + off, n);
    return 0;
}
int port_store_write(uint32_t off, const void *src, uint32_t n) {
    if (off > STORE_BYTES || n > STORE_BYTES - off) return 1;
    memcpy(store + off, src, n);
    return 0;
}
void port_exit(int code) { (void)code; longjmp(at_end, 1); }   /* the input is used up */
void port_mark(uint8_t region, uint8_t begin) { (void)region; (void)begin; }
int port_stack_bounds(uint8_t **lo, uint8_t **hi) { (void)lo; (void)hi; return 0; }
int port_sensor_read(void *dst, uint32_t n) { (void)dst; (void)n; return 0; }

static void fail(const char *what) {
    fprintf(stderr, "fuzz_frames: %s\n", what);
    abort();
}

static int model_same(const mct_app *a, const mct_app *b) {
    return !memcmp(a->params, b->params, sizeof a->params) && !memcmp(a->state, b->state, sizeof a->state) &&
           !memcmp(&a->ts, &b->ts, sizeof a->ts);
}

/* The reply of one poll: one frame, checked; its command and status through the pointers. */
static void check_reply(uint8_t *cmd, uint8_t *status) {
    if (reply_len < 8) fail("reply shorter than a frame");
    if (reply[0] != 0x5Au) fail("reply without its sync byte");
    if (reply[1] != MCT_PROTOCOL_VERSION) fail("reply of another protocol version");
    if (!(reply[2] & 0x80u)) fail("reply command without bit 7");
    uint16_t n = (uint16_t)(reply[3] | (reply[4] << 8));
    if (n < 1 || reply_len != (size_t)n + 7u) fail("reply length does not match its frame");
    uint16_t crc = mct_crc16(0xFFFFu, reply + 1, (uint16_t)(n + 4u));
    if ((uint16_t)(reply[reply_len - 2] | (reply[reply_len - 1] << 8)) != crc) fail("reply CRC is wrong");
    *cmd = (uint8_t)(reply[2] & 0x7Fu);
    *status = reply[5];
}

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    size = LLVMFuzzerMutate(data, size, max_size);
    if (seed % 8u == 0) return size;
    for (size_t i = 0; i + 5 <= size;) {
        if (data[i] != 0xA5u) { i++; continue; }
        if (seed % 8u != 1) data[i + 1] = MCT_PROTOCOL_VERSION;   /* mostly frames of this version */
        size_t len = (size_t)(data[i + 3] | (data[i + 4] << 8));
        if (i + 7 + len > size) break;   /* the last frame runs past the end: left as it is */
        uint16_t crc = mct_crc16(0xFFFFu, data + i + 1, (uint16_t)(len + 4u));
        data[i + 5 + len] = (uint8_t)crc;
        data[i + 6 + len] = (uint8_t)(crc >> 8);
        i += 7 + len;
    }
    return size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    in_data = data;
    in_len = size;
    in_pos = 0;
    memset(store, 0xFF, sizeof store);   /* erased storage, no save yet */
    mct_app_init(&app);
    for (;;) {
        memcpy(&before, &app, sizeof app);
        reply_len = 0;
        if (setjmp(at_end)) {   /* the input ended inside a frame (or before one): no reply, no change */
            if (!model_same(&app, &before)) fail("a frame cut short changed the model");
            return 0;
        }
        mct_app_poll(&app);
        uint8_t cmd, status;
        check_reply(&cmd, &status);
        int may_change = status == MCT_ST_OK && (cmd == MCT_CMD_TRAIN || cmd == MCT_CMD_WRITE ||
                                                 cmd == MCT_CMD_LOAD || cmd == MCT_CMD_RESET);
        if (!may_change && !model_same(&app, &before)) fail("a refused or read-only frame changed the model");
    }
}
