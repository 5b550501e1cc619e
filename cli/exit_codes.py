"""The exit codes of `mcutrain` that scripts can rely on (also listed in `mcutrain --help`)."""

EXIT_ERROR = 1  # anything that went wrong; the message says what to do
EXIT_USAGE = 2  # the command line itself is wrong (click's own code)
EXIT_NO_FIT = 3  # the model does not fit the board's memory
EXIT_MISSING_TOOL = 4  # PlatformIO, a simulator or a toolchain is not installed
EXIT_INTERRUPTED = 130  # Ctrl-C (what was kept depends on the command and on how often it was pressed)
EXIT_TERMINATED = 143  # SIGTERM or SIGHUP: handled as Ctrl-C, with this code (128 + SIGTERM)
