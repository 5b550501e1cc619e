/* main.c - firmware entry: paint the stack, set up the port, load the newest save, then answer
 * host frames forever. Arduino builds use setup()/loop() from ports/port_arduino.cpp instead. */
#include "mct_app.h"
#include "mct_port.h"

#ifndef ARDUINO
static mct_app app;

#ifdef MCT_PORT_POSIX
int mct_posix_argc;      /* the native port reads its options (--pty) from here */
char **mct_posix_argv;
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
#endif
