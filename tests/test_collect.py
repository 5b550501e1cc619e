"""Data from the device: the firmware of a model trained with --features answers CAPTURE with its sensor's next raw
window (a simulated board plays a recording back: `mcutrain serve --sensor`), and `mcutrain collect` records
labelled windows into the dataset layout `train --features` reads. Runs the real native firmware and the Cortex-M4F
and Cortex-M3 firmware in QEMU (the end-to-end test: capture -> train -> export -> predict on the board)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_features_cli import AUDIO, MOTION, gestures, word_folder

from helpers import assert_same_bits, cli, cli_ok

AUDIO_NET = "linear:300x8,relu,linear:8x3,softmax"


def _audio_project(tmp_path: Path, board: str) -> tuple:
    """(the word folder, the exported project) of a small audio model trained on it."""
    from mcutrain.exporter.export import export_project
    from mcutrain.modelfile import load_model

    data = word_folder(tmp_path / "words", per_label=6)
    model = tmp_path / "m.mct"
    cli_ok("train", "--data", str(data), "--features", AUDIO, "--net", AUDIO_NET, "--loss", "xent", "--steps", "30",
           "-o", str(model))  # fmt: skip
    ex = export_project(load_model(model), board, tmp_path / "fw", sim=True)
    return data, ex


def test_collect_records_the_sensor_windows_into_wav_label_folders(tmp_path: Path, pio_core: Path) -> None:
    """The native firmware's sensor plays back a folder of WAVs; `collect` writes exactly those samples as WAVs of
    one label folder, numbering after the files already there, counts per label, and stops with a clear error when
    the recording runs out (NO_WINDOW), keeping what it got. The collected folder trains a model."""
    from mcutrain.features import FeatureSpec
    from mcutrain.wav import load_window

    data, ex = _audio_project(tmp_path, "native")
    spec = FeatureSpec.parse(AUDIO)
    out = tmp_path / "captured"
    r = cli_ok("collect", "--sim", str(ex.path), "--sensor", str(data / "up"), "--label", "up", "--count", "4",
               str(out))  # fmt: skip
    assert "recorded 4 windows labelled 'up'" in r.output and "up 4 (1 labels, 4 windows)" in r.output, r.output
    played = sorted((data / "up").glob("*.wav"))
    for i in range(4):
        assert np.array_equal(load_window(out / "up" / f"{i:04d}.wav", spec), load_window(played[i], spec))
    # a second label; the recording holds 6 windows, 8 are asked for: the 6 are kept, the error says why
    r = cli("collect", "--sim", str(ex.path), "--sensor", str(data / "down"), "--label", "down", "--count", "8",
            "--wait", "0.2", str(out))  # fmt: skip
    assert r.exit_code != 0
    assert "no window for 0.2 s after 6 of 8 windows" in r.output, r.output
    assert "down 6, up 4 (2 labels, 10 windows)" in r.output, r.output
    # more of a label is numbered after the files there
    cli_ok("collect", "--sim", str(ex.path), "--sensor", str(data / "up"), "--label", "up", "--count", "2", str(out))
    assert sorted(f.name for f in (out / "up").glob("*.wav")) == [f"{i:04d}.wav" for i in range(6)]
    assert np.array_equal(load_window(out / "up" / "0004.wav", spec), load_window(played[0], spec))
    r = cli_ok("train", "--data", str(out), "--features", AUDIO, "--net", "linear:300x4,relu,linear:4x2,softmax",
               "--loss", "xent", "--steps", "5", "-o", str(tmp_path / "again.mct"))  # fmt: skip


def test_collect_errors_are_clear(tmp_path: Path, pio_core: Path) -> None:
    """Bad uses of collect and of a sensor say what is wrong and what to do."""
    from mcutrain.exporter.export import export_project
    from mcutrain.modelfile import load_model

    cli_ok("train", "--steps", "5", "-o", str(tmp_path / "plain.mct"))
    plain = export_project(load_model(tmp_path / "plain.mct"), "native", tmp_path / "plainfw", sim=True)
    r = cli("collect", "--sim", str(plain.path), "--sensor", str(tmp_path), "--label", "a", "--count", "1",
            str(tmp_path / "o"))  # fmt: skip
    assert r.exit_code != 0 and "takes no raw windows" in r.output and "--features" in r.output, r.output
    r = cli("collect", "--sim", str(plain.path), "--label", "a", "--count", "1", str(tmp_path / "o"))
    assert r.exit_code != 0 and "--sensor" in r.output, r.output
    r = cli("collect", "--label", "a", "--count", "1", str(tmp_path / "o"))
    assert r.exit_code != 0 and "--project" in r.output, r.output
    r = cli("collect", "--sim", str(plain.path), "--label", "../up", "--count", "1", str(tmp_path / "o"))
    assert r.exit_code != 0 and "label '../up' cannot name a folder" in r.output, r.output
    r = cli("serve", str(plain.path), "--sensor", str(tmp_path))
    assert r.exit_code != 0 and "takes no raw windows" in r.output, r.output


@pytest.mark.parametrize("board", ["nucleo_f401re"])
def test_capture_in_qemu_gives_the_recording_then_no_window(board: str, tmp_path: Path, pio_core: Path) -> None:
    """The Cortex-M4F firmware in QEMU reads its sensor through semihosting: CAPTURE gives the recording's windows in
    order, bit for bit, then status NO_WINDOW; a captured window predicts as the host twin predicts it; a firmware
    without a pipeline answers CAPTURE with a clear error."""
    from mcutrain.exporter import sim
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.features import FeatureSpec
    from mcutrain.wav import load_window

    data, ex = _audio_project(tmp_path, board)
    spec = FeatureSpec.parse(AUDIO)
    twin = DeviceTwin(ex.model)
    played = [load_window(f, spec) for f in sorted((data / "beep").glob("*.wav"))]
    with sim.start(ex.path, ex.board, sensor=data / "beep") as s:
        got = [s.device.capture(spec) for _ in played]
        for g, p in zip(got, played):
            assert g is not None and g.dtype == np.int16 and np.array_equal(g, p)
        assert s.device.capture(spec) is None  # the recording ended: NO_WINDOW
        assert_same_bits(s.device.predict_raw(got[0]), twin.predict_raw(got[0]), "PREDICT_RAW of a captured window")
    with sim.start(ex.path, ex.board, build=False) as s:  # no recording: no window
        assert s.device.capture(spec) is None


def test_imu_capture_train_export_predict_on_a_simulated_board(tmp_path: Path, pio_core: Path) -> None:
    """The IMU path end to end on a Cortex-M3 in QEMU (soft float): a gesture model's board plays back recorded
    windows of each gesture, `collect` records them labelled into windows.npz, `train --features` trains on what was
    captured, the export runs on the board, which computes the features and classifies held-out windows as the host
    twin does, bit for bit, and as well."""
    from mcutrain.exporter import sim
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.featdata import raw_windows
    from mcutrain.features import FeatureSpec
    from mcutrain.modelfile import load_model

    spec = FeatureSpec.parse(MOTION)
    net = "linear:27x12,tanh,linear:12x3,softmax"
    # a first model only so that the board has the pipeline; it is trained on a few windows
    x0, y0 = gestures(30, seed=1)
    np.savez(tmp_path / "seed.npz", x=x0, y=y0)
    cli_ok("train", "--data", str(tmp_path / "seed.npz"), "--features", MOTION, "--net", net, "--loss", "xent",
           "--steps", "20", "-o", str(tmp_path / "seed.mct"))  # fmt: skip
    ex = export_project(load_model(tmp_path / "seed.mct"), "bluepill", tmp_path / "fw", sim=True)
    x, y = gestures(90, seed=4)
    out = tmp_path / "imu"
    names = ["left", "right", "up"]
    for c, name in enumerate(names):
        rec = tmp_path / f"rec_{name}.npz"
        np.savez(rec, x=x[y == c], y=y[y == c])
        r = cli_ok("collect", "--sim", str(ex.path), "--sensor", str(rec), "--label", name, "--count",
                   str(int(np.sum(y == c))), str(out))  # fmt: skip
    assert f"left {np.sum(y == 0)}, right {np.sum(y == 1)}, up {np.sum(y == 2)}" in r.output, r.output
    xc, yc, labels = raw_windows(out / "windows.npz", spec)
    assert labels == names
    for c in range(3):
        assert np.array_equal(xc[yc == c], x[y == c])  # the float windows arrive bit for bit
    model = tmp_path / "g.mct"
    cli_ok("train", "--data", str(out / "windows.npz"), "--features", MOTION, "--net", net, "--loss", "xent",
           "--steps", "300", "-o", str(model))  # fmt: skip
    ck = load_model(model)
    assert ck.metadata["frontend"]["labels"] == names
    ex2 = export_project(ck, "bluepill", tmp_path / "fw2", sim=True)
    twin = DeviceTwin(ex2.model)
    xt, yt = gestures(15, seed=9)
    with sim.start(ex2.path, ex2.board) as s:
        got = np.stack([s.device.predict_raw(w) for w in xt])
    assert_same_bits(got, twin.predict_raw(xt), "PREDICT_RAW")
    assert np.mean(np.argmax(got, 1) == yt) >= 0.9


UNO_MOTION = "motion:rate=50,length=32,axes=3,stats=mean+rms+std+min+max,bands=2,fft=32,band_lo=0.5,band_hi=20"


def test_capture_and_collect_on_the_uno_in_simavr(tmp_path: Path, pio_core: Path) -> None:
    """The Uno's stand-in (the ATmega328P in mcutrain's simavr harness) reads its sensor through an I/O register the
    harness serves from the recording: CAPTURE gives an NPZ recording's 32 x 3 float windows in order, bit for bit,
    then NO_WINDOW; a captured window predicts as the host twin predicts it; the memory plan's flash (with the front
    end's code) covers the built firmware; without a recording there is no window; a served board (`serve --sensor`)
    plays the recording on from client to client; and `collect --sim --sensor` records a CSV recording's windows with
    their label into windows.npz."""
    from mcutrain.exporter import sim
    from mcutrain.exporter.client import Device
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.memplan import plan
    from mcutrain.exporter.serve import serve
    from mcutrain.exporter.sim_avr import avr_sizes
    from mcutrain.exporter.twin import DeviceTwin
    from mcutrain.featdata import raw_windows
    from mcutrain.features import FeatureSpec
    from mcutrain.modelfile import load_model

    spec = FeatureSpec.parse(UNO_MOTION)
    x, y = gestures(24, seed=3)
    x = np.ascontiguousarray(x[:, :32, :])
    np.savez(tmp_path / "seed.npz", x=x, y=y)
    cli_ok("train", "--data", str(tmp_path / "seed.npz"), "--features", UNO_MOTION, "--net",
           "linear:21x6,tanh,linear:6x3,softmax", "--loss", "xent", "--opt", "sgd", "--steps", "20", "-o",
           str(tmp_path / "u.mct"))  # fmt: skip
    ex = export_project(load_model(tmp_path / "u.mct"), "uno", tmp_path / "fw", trainable="last:1", sim=True)
    played = x[:5]
    np.savez(tmp_path / "rec.npz", x=played, y=y[:5])
    with sim.start(ex.path, ex.board, sensor=tmp_path / "rec.npz") as s:
        got = [s.device.capture(spec) for _ in played]
        for g, p in zip(got, played):
            assert g is not None and g.dtype == np.float32 and np.array_equal(g, p)
        assert s.device.capture(spec) is None  # the recording ended: NO_WINDOW
        assert s.device.capture(spec) is None  # and stays so
        twin = DeviceTwin(ex.model)
        assert_same_bits(s.device.predict_raw(got[0]), twin.predict_raw(got[0]), "PREDICT_RAW of a captured window")
        flash = avr_sizes(s.firmware)["flash"]
    mp = plan(ex.model, ex.board, sim=True)  # the plan counts the front end's code: it covers the real firmware
    assert flash <= mp.flash <= mp.flash_budget, (flash, mp.table())
    with sim.start(ex.path, ex.board, build=False) as s:  # no recording: no window
        assert s.device.capture(spec) is None
    # served (`mcutrain serve --sensor`): client after client, the recording goes on where the last one left it
    with serve(ex.path, ex.board, build=False, sensor=tmp_path / "rec.npz") as board:
        for first in (0, 3):
            with Device.open(board.port, 1000000, timeout=60.0) as d:
                for p in played[first : first + 3]:
                    g = d.capture(spec)
                    assert g is not None and np.array_equal(g, p)
        with Device.open(board.port, 1000000, timeout=60.0) as d:
            assert d.capture(spec) is None
    # collect from a CSV recording (one window per row, the label last, as train --features reads it)
    rec = x[5:9]
    csv = tmp_path / "rec.csv"
    rows = [",".join([*(repr(float(v)) for v in w.ravel()), "2"]) for w in rec]
    csv.write_text("\n".join(rows) + "\n")
    out = tmp_path / "imu"
    r = cli_ok("collect", "--sim", str(ex.path), "--sensor", str(csv), "--label", "up", "--count", "4", str(out))
    assert "recorded 4 windows labelled 'up'" in r.output and "up 4 (1 labels, 4 windows)" in r.output, r.output
    xc, yc, labels = raw_windows(out / "windows.npz", spec)
    assert labels == ["up"] and list(yc) == [0] * 4
    assert np.array_equal(xc, rec)
