/* arduino_glue.cpp - on the Arduino framework the core's main() calls setup() and loop() (C++
 * functions): the self-test runs once from setup(). Other builds compile nothing here. */
#ifdef ARDUINO
extern "C" int mct_selftest_main(void);

void setup() { mct_selftest_main(); }

void loop() {}
#endif

/* Keeps the file a valid translation unit in builds without Arduino. */
typedef int mct_arduino_glue_unit;
