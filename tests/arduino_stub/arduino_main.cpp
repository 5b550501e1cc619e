/* What the Arduino core does around a sketch: setup() once, loop() for ever. */
#include "Arduino.h"
#include "EEPROM.h"

HardwareSerial Serial;
EEPROMClass EEPROM;

void setup();
void loop();

int main() {
    setup();
    for (;;) loop();
}
