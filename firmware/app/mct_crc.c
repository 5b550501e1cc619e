/* mct_crc.c - bitwise CRCs: small code, no tables (flash is precious on an 8-bit part). */
#include "mct_crc.h"

uint16_t mct_crc16(uint16_t crc, const uint8_t *p, uint32_t n) {
    while (n--) {
        crc ^= (uint16_t)((uint16_t)*p++ << 8);
        for (uint8_t b = 0; b < 8; b++) crc = (uint16_t)((crc & 0x8000u) ? ((unsigned)crc << 1) ^ 0x1021u : (unsigned)crc << 1);
    }
    return crc;
}

uint32_t mct_crc32(uint32_t crc, const uint8_t *p, uint32_t n) {
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (uint8_t b = 0; b < 8; b++) crc = (crc & 1u) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}
