"""`mcutrain fleet`: federated rounds over a fleet of devices with Flower (mcutrain.fleet)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, List, Optional

import click

from mcutrain.fleet.config import STRATEGIES

from .common import CliError, OutputPath, check_output, example
from .data_options import data_options, pop_data_options


def _round_line(rep: Any, rounds: int, n_devices: int) -> str:
    """One line of progress for a round."""
    acc = f"accuracy {rep.accuracy:.3f}" if rep.accuracy is not None else "accuracy -"
    if rep.round == 0:
        return f"round 0/{rounds}  {acc}  (the starting model)"
    dev = f"  device accuracy {rep.device_accuracy:.3f}" if rep.device_accuracy is not None else ""
    line = (
        f"round {rep.round}/{rounds}  {acc}{dev}  devices {len(rep.answered)}/{n_devices}  "
        f"{rep.seconds:.1f} s  {rep.bytes / 1024:.0f} KiB"
    )
    if rep.dropped:
        line += "\n  dropped: " + "; ".join(f"{v}" for v in rep.dropped.values())
    if rep.failed:
        line += f"\n  round failed: {rep.failed}"
    return line


@click.command("fleet")
@click.argument("fleet_file", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--simulate",
    type=click.IntRange(1, 4096),
    default=None,
    help="Simulate N devices: split --data non-IID over them and write a fleet file into --workdir.",
)
@click.option("--board", default="native", show_default=True, help="Board of the simulated devices.")
@click.option(
    "--add-board",
    "extra_boards",
    multiple=True,
    help="One more simulated device of this board (e.g. nano33ble under QEMU); repeatable.",
)
@click.option("--model", type=click.Path(dir_okay=False), default=None, help="Starting model (with --simulate).")
@data_options
@click.option(
    "--classes-per-device", type=click.IntRange(1), default=2, show_default=True, help="Non-IID split: classes each."
)
@click.option("--workdir", type=OutputPath(file_okay=False), default=None, help="Folder of a simulated fleet.")
@click.option("--rounds", type=click.IntRange(1), default=None, help="Rounds [default: the fleet file's].")
@click.option("--strategy", type=click.Choice(list(STRATEGIES)), default=None, help="Flower strategy.")
@click.option("--local-steps", type=click.IntRange(1), default=None, help="TRAIN steps per device and round.")
@click.option("--seed", type=int, default=None, help="Seed of the split and the sample order.")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None, help="Global model file (.mct).")
@click.option("--log", type=OutputPath(dir_okay=False), default=None, help="JSON-lines log (mcutrain plot draws it).")
@click.option("--force", is_flag=True, help="Replace an existing global model, log or simulated fleet.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
@example("""
mcutrain fleet fleet.toml
mcutrain fleet --simulate 4 --board native --add-board nano33ble --model start.mct \\
    --data digits.npz --rounds 8 -o global.mct
mcutrain plot fleet.jsonl -o rounds.png
""")
def fleet(fleet_file: Optional[str], **kw: Any) -> None:
    """Learn on a fleet of devices: every device trains on its own data, Flower's server averages what
    they learn (FedAvg or another strategy) and sends the global model back, round after round.

    FLEET_FILE is a TOML file with the starting model, the devices (a serial port, or a simulated board,
    each with its data shard) and the rounds (see the README's "Fleet" section). With --simulate N, the
    fleet file is made for you: --data is split non-IID across N simulated boards (native firmware
    processes, or QEMU/simavr stand-ins), with a held-out test set for the global model's accuracy.

    After every round the global model is written atomically (-o) and a line goes to the log; a device
    that fails is dropped for the round and reconnected in the next."""
    from mcutrain.fleet.config import load_config
    from mcutrain.fleet.server import Fleet

    data = pop_data_options(kw)
    if kw["simulate"] is not None:
        if fleet_file:
            raise CliError("give a fleet file or --simulate N, not both")
        fleet_file = str(_simulated_fleet_file(data, kw))
    elif not fleet_file:
        raise CliError("give a fleet file (TOML), or --simulate N with --model and --data")
    elif data.given or kw["model"] or kw["extra_boards"]:
        raise CliError("--model, --data and --add-board go with --simulate; a fleet file names its own")
    cfg = load_config(fleet_file)
    over = {k: kw[k] for k in ("rounds", "strategy", "local_steps", "seed") if kw[k] is not None}
    if kw["output"]:
        over["output"] = Path(kw["output"])
    if kw["log"]:
        over["log"] = Path(kw["log"])
    cfg = dataclasses.replace(cfg, **over)
    check_output(cfg.output, kw["force"], "global model")
    if cfg.log is not None:
        check_output(cfg.log, kw["force"], "log")
    n = len(cfg.devices)
    echo = (lambda s: None) if kw["quiet"] else click.echo
    run = Fleet(cfg, on_round=lambda r: echo(_round_line(r, cfg.rounds, n)), on_status=echo)
    run.prepare()
    echo(f"{n} devices, {cfg.rounds} rounds of {cfg.local_steps} steps, strategy {cfg.strategy} (Flower)")
    res = run.run()
    done = [r for r in res.rounds[1:] if not r.failed]
    last = res.rounds[-1]
    acc = f", accuracy {last.accuracy:.3f}" if last.accuracy is not None else ""
    click.echo(
        f"{len(done)} of {cfg.rounds} rounds completed in {res.seconds:.1f} s{acc}; global model {cfg.output}"
        + (f", log {cfg.log}" if cfg.log else "")
    )


def _simulated_fleet_file(data: Any, kw: Any) -> Path:
    """Split --data for --simulate N and write the fleet file; returns its path."""
    from mcutrain.fleet.split import simulate_fleet
    from mcutrain.sources import load_dataset

    if not kw["model"]:
        raise CliError("--simulate needs the starting model: --model start.mct (e.g. from mcutrain train)")
    if not data.path:
        raise CliError("--simulate needs a data set to split: --data FILE (CSV, NPZ or IDX with --labels)")
    workdir = Path(kw["workdir"] or "fleet-sim")
    if (workdir / "fleet.toml").exists() and not kw["force"]:
        raise CliError(f"{workdir} holds a simulated fleet already; pass --force to replace it or choose --workdir")
    ds = load_dataset(data)
    extra: List[str] = list(kw["extra_boards"])
    path, _ = simulate_fleet(
        ds,
        kw["simulate"],
        kw["board"],
        workdir,
        Path(kw["model"]),
        rounds=kw["rounds"] or 10,
        local_steps=kw["local_steps"] or 100,
        strategy=kw["strategy"] or "fedavg",
        classes_per_device=kw["classes_per_device"],
        seed=kw["seed"] or 0,
        extra_boards=extra,
        output=Path(kw["output"]) if kw["output"] else Path("global.mct"),
        log=Path(kw["log"]) if kw["log"] else Path("fleet.jsonl"),
    )
    return path
