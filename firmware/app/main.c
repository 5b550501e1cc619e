/* main.c - firmware entry: paint the stack, set up the port, load the newest save, then answer
 * host frames forever. Arduino builds use setup()/loop() from ports/port_arduino.cpp instead; under
 * `pio test` (PIO_UNIT_TESTING) the self-test's main (test/test_model/test_main.c) runs instead. */
#include "mct_app.h"
#include "mct_port.h"

#ifndef ARDUINO
#ifdef MCT_PORT_POSIX
int mct_posix_argc;      /* the native port reads its options (--pty) from here */
char **mct_posix_argv;
#endif

#ifndef PIO_UNIT_TESTING
static mct_app app;

#ifdef MCT_PORT_POSIX
int main(int argc, char **argv) {
    mct_posix_argc = argc;
    mct_posix_argv = argv;
#else
int main(void) {
#endif
    mct_stack_paint();
    port_init();
    mct_app_init(&app);
    for (;;) mct_app_poll(&app);
}
#endif /* PIO_UNIT_TESTING */
#endif /* ARDUINO */

/* Keeps the file a valid translation unit (ISO C) when it defines nothing else. */
typedef int mct_main_unit;
