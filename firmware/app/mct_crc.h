/* mct_crc.h - checksums of the device protocol (CRC-16/CCITT-FALSE) and of saves (CRC-32, as zlib). */
#ifndef MCT_CRC_H
#define MCT_CRC_H

#include <stdint.h>

/* CRC-16/CCITT-FALSE (poly 0x1021, no reflection), continued from crc over n bytes (start with 0xFFFF). */
uint16_t mct_crc16(uint16_t crc, const uint8_t *p, uint32_t n);
/* CRC-32 (zlib's), continued from crc over n bytes (start with 0). */
uint32_t mct_crc32(uint32_t crc, const uint8_t *p, uint32_t n);

#endif /* MCT_CRC_H */
