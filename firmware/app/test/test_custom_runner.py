# PlatformIO test runner of mcutrain's exported projects (platformio.ini: test_framework = custom), offline:
# no test library is downloaded. `pio test -e ENV` builds the firmware with the self-test's main
# (test/test_model/test_main.c) and runs it: env:native as a program on this computer, env:sim-BOARD in the
# board's simulator through the env's test_testing_command (QEMU with the UART on stdio, or mcutrain's simavr
# harness with serial=stdio); on a real board (an embedded platform, no test_testing_command) PlatformIO
# uploads it and this runner reads the board's serial port. The program prints, through its serial port,
#     file:line:name:PASS
#     file:line:name:FAIL: what went wrong
#     file:line:name:IGNORE: why                 (reported as skipped)
#     TESTS_DONE <number of failed tests>
# and ends with exit status 1 when a test failed, 0 otherwise. A program that ends before TESTS_DONE (a
# crash, a stack overflow in the simulator) or runs too long (custom_test_timeout = seconds, default 300)
# fails the run as ERRORED, with its last other output. Everything it prints is shown with `pio test -v`.
import collections
import os
import queue
import re
import subprocess
import threading
import time

import click
from platformio.project.helpers import load_build_metadata
from platformio.test.exception import UnitTestError
from platformio.test.result import TestCase, TestCaseSource, TestStatus
from platformio.test.runners.base import TestRunnerBase

CASE_RE = re.compile(
    r"^(?P<file>[^:\s]+):(?P<line>\d+):(?P<name>\w+):(?P<status>PASS|FAIL|IGNORE)"
    r"(?::\s*(?P<msg>.*))?$"
)
DONE_RE = re.compile(r"^TESTS_DONE (\d+)$")
EXIT_GRACE = 10.0  # seconds the program may take to exit after TESTS_DONE
# exit statuses of the simulators that explain themselves (see firmware/host_tools/avr_run.c, ports/port_qemu_*.c)
EXIT_MEANING = {
    97: "stack overflow (simavr harness)",
    98: "the simulated CPU crashed (simavr harness)",
    99: "CPU fault, trap or stack overflow on the target",
    124: "cycle limit of the simulator",
}


class CustomTestRunner(TestRunnerBase):
    """Runs the self-test program and turns its lines into PlatformIO test cases."""

    def setup(self):
        self._done = None  # the failures TESTS_DONE reported
        self._fail_lines = 0  # FAIL lines seen
        self._tail = collections.deque(maxlen=25)  # the last lines that were not results

    # ---- the program's output ----
    def on_testing_line_output(self, line):
        line = line.rstrip("\r\n")
        if self.options.verbose:
            click.echo(line)
        m = CASE_RE.match(line)
        if m:
            case = TestCase(
                name=m["name"],
                status=TestStatus.from_string(m["status"]),
                message=m["msg"],
                stdout=line,
                source=TestCaseSource(m["file"], int(m["line"])),
            )
            self.test_suite.add_case(case)
            self._fail_lines += case.status == TestStatus.FAILED
            if not self.options.verbose:
                click.echo(case.humanize())
            return
        d = DONE_RE.match(line)
        if d and self._done is None:
            self._done = int(d.group(1))
            self.test_suite.on_finish()  # ends the serial reader of a real board
            return
        self._tail.append(line)

    def _error(self, msg):
        """Fail the suite (PlatformIO reports it as ERRORED) with msg and the program's last other lines."""
        tail = "\n".join(self._tail)
        raise UnitTestError(msg + (":\n" + tail if tail else ""))

    def _check_done(self, code=None):
        """The run must have ended with TESTS_DONE, agreeing with the FAIL lines and the exit status."""
        if self._done is None:
            meaning = EXIT_MEANING.get(code, "") if code is not None else ""
            ended = (
                f"ended with status {code}{' (' + meaning + ')' if meaning else ''}" if code is not None else "ended"
            )
            self._error(f"the test program {ended} before TESTS_DONE")
        if not self.test_suite.cases:
            self._error("the test program ran no tests")
        if self._done != self._fail_lines:
            self._error(f"TESTS_DONE reports {self._done} failed tests, but {self._fail_lines} FAIL lines came")
        if code is not None and (code != 0) != (self._done != 0):
            self._error(f"the test program exited with status {code} after {self._done} failed tests")

    # ---- running it ----
    def testing_command(self):
        """The env's test_testing_command, else the built program (env:native)."""
        env = self.test_suite.env_name
        cmd = self.project_config.get(f"env:{env}", "test_testing_command")
        if cmd:
            return list(cmd)
        program = os.path.join(self.project_config.get("platformio", "build_dir"), env, "program")
        if not os.path.exists(program):
            meta = load_build_metadata(os.getcwd(), env, cache=True)
            if meta:
                program = meta["prog_path"]
        return [program] + list(self.options.program_args or [])

    def stage_testing(self):
        if self.options.without_testing:
            return None
        env = f"env:{self.test_suite.env_name}"
        if self.platform.is_embedded() and not self.project_config.get(env, "test_testing_command"):
            super().stage_testing()  # a real board: PlatformIO reads its serial port
            self._check_done()
            return None
        click.secho("Testing...", bold=True)
        cmd = self.testing_command()
        timeout = float(self.project_config.get(env, "custom_test_timeout", 300))
        if self.options.verbose:
            click.echo(" ".join(cmd))
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as e:
            raise UnitTestError(f"cannot run {cmd[0]}: {e}") from e
        # stdout carries the test lines; stderr (the simulator's messages) is read apart, so that it cannot cut
        # into a test line
        chunks = queue.Queue()

        def pump(stream, name):
            for raw in iter(stream.readline, b""):
                chunks.put((name, raw))
            chunks.put((name, None))

        for stream, name in ((proc.stdout, "out"), (proc.stderr, "err")):
            threading.Thread(target=pump, args=(stream, name), daemon=True).start()
        open_streams = 2
        deadline = time.monotonic() + timeout
        while open_streams:
            try:
                name, raw = chunks.get(timeout=0.2)
            except queue.Empty:
                name, raw = None, b""
            if raw is None:
                open_streams -= 1
            elif name == "out":
                self.on_testing_data_output(raw)
                if self._done is not None:
                    deadline = min(deadline, time.monotonic() + EXIT_GRACE)
            elif name == "err":
                line = raw.decode("utf8", "replace").rstrip()
                self._tail.append(line)
                if self.options.verbose:
                    click.echo(line, err=True)
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                self._flush_rest()
                self._error(
                    f"the test program did not exit {EXIT_GRACE:.0f} s after TESTS_DONE"
                    if self._done is not None
                    else f"the test program timed out after {timeout:.0f} s (custom_test_timeout)"
                )
        code = proc.wait()
        self._flush_rest()
        self._check_done(code)
        return None

    def _flush_rest(self):
        """Pass on a last line that came without a newline."""
        rest, self._testing_output_buffer = self._testing_output_buffer, ""
        if rest.strip():
            self.on_testing_line_output(rest)
