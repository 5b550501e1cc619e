/* Stand-in for the Arduino EEPROM library (4 KB, erased to 0xFF), kept in the file $MCT_TEST_EEPROM
 * when set, so a save survives a restart of the test program. */
#ifndef MCT_TEST_EEPROM_H
#define MCT_TEST_EEPROM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

class EEPROMClass {
public:
    EEPROMClass() { memset(cells_, 0xFF, sizeof cells_); load(); }
    int length() const { return (int)sizeof cells_; }
    uint8_t read(int i) const { return cells_[i]; }
    void write(int i, uint8_t v) { cells_[i] = v; store(); }

private:
    uint8_t cells_[4096];
    void load() {
        const char *p = getenv("MCT_TEST_EEPROM");
        FILE *f = p ? fopen(p, "rb") : 0;
        if (f) { size_t n = fread(cells_, 1, sizeof cells_, f); (void)n; fclose(f); }
    }
    void store() const {
        const char *p = getenv("MCT_TEST_EEPROM");
        FILE *f = p ? fopen(p, "wb") : 0;
        if (f) { fwrite(cells_, 1, sizeof cells_, f); fclose(f); }
    }
};

extern EEPROMClass EEPROM;

#endif
