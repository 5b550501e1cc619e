"""`mcutrain fleet`: federated rounds over a fleet of devices with Flower's Deployment Engine (mcutrain.fleet).

`mcutrain fleet FLEET_FILE` (or --simulate N) runs a whole fleet on this machine; `link`, `node`, `run`,
`register` and `certs` are the parts of a fleet spread over machines."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, List, Optional

import click

from mcutrain.fleet.config import STRATEGIES

from .common import CliError, OutputPath, check_output, example
from .data_options import data_options, pop_data_options


def _round_line(rep: Any, rounds: int, n_devices: int, lines: bool = True) -> str:
    """One line of progress for a round (lines: the devices have serial lines whose bytes count)."""
    acc = f"accuracy {rep.accuracy:.3f}" if rep.accuracy is not None else "accuracy -"
    if rep.round == 0:
        return f"round 0/{rounds}  {acc}  (the starting model)"
    dev = f"  device accuracy {rep.device_accuracy:.3f}" if rep.device_accuracy is not None else ""
    line = f"round {rep.round}/{rounds}  {acc}{dev}  devices {len(rep.answered)}/{n_devices}  {rep.seconds:.1f} s" + (
        f"  {rep.bytes / 1024:.0f} KiB" if lines else ""
    )
    if rep.dropped:
        line += "\n  dropped: " + "; ".join(f"{v}" for v in rep.dropped.values())
    if rep.failed:
        line += f"\n  round failed: {rep.failed}"
    return line


class FleetGroup(click.Group):
    """`mcutrain fleet` runs a local fleet unless its first argument names a subcommand (link, node, ...)."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["local", *args]
        return super().parse_args(ctx, args)


@click.group("fleet", cls=FleetGroup)
def fleet() -> None:
    """Learn on a fleet of devices with Flower: every device trains on its own data, the coordinator
    averages what they learn (FedAvg or another strategy) and sends the global model back, round after
    round.

    \b
    mcutrain fleet FLEET_FILE | --simulate N   the whole fleet on this machine (see `mcutrain fleet local`)
    mcutrain fleet certs                       CA, SuperLink certificate and node keys for a deployment
    mcutrain fleet link                        the SuperLink, on the coordinating machine
    mcutrain fleet register KEY.pub            let a node's key in
    mcutrain fleet node --superlink HOST:PORT  one device on a gateway, as a SuperNode
    mcutrain fleet run FLEET_FILE              run the rounds on the SuperLink's nodes"""


@fleet.command("local")
@click.argument("fleet_file", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--simulate",
    type=click.IntRange(1, 4096),
    default=None,
    help="Simulate N devices: split --data non-IID over them and write a fleet file into --workdir.",
)
@click.option(
    "--board",
    default="native",
    show_default=True,
    help="Board of the simulated devices; twin: host twins on Flower's Simulation Engine (thousands fit).",
)
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
@click.option(
    "--tls", is_flag=True, help="TLS and node authentication on localhost too (certificates made for the run)."
)
@click.option("--resume", is_flag=True, help="Go on after the last round of the global model file (-o) and its log.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
@example("""
mcutrain fleet fleet.toml
mcutrain fleet --simulate 4 --board native --add-board nano33ble --model start.mct \\
    --data digits.npz --rounds 8 -o global.mct
mcutrain plot fleet.jsonl -o rounds.png
""")
def local(fleet_file: Optional[str], **kw: Any) -> None:
    """Run a fleet on this machine: a Flower SuperLink and one SuperNode per device start as processes on
    127.0.0.1, the fleet's ServerApp runs the rounds, everything stops at the end (also on an error, Ctrl-C
    or SIGTERM).

    FLEET_FILE is a TOML file with the starting model, the devices (a serial port, or a simulated board,
    each with its data shard) and the rounds (see the README's "Fleet" section). With --simulate N, the
    fleet file is made for you: --data is split non-IID across N simulated boards (native firmware
    processes, or QEMU/simavr stand-ins), with a held-out test set for the global model's accuracy.

    After every round the global model is written atomically (-o) and a line goes to the log; a device
    that fails is dropped for the round and reconnected in the next."""
    from mcutrain.fleet.config import load_config
    from mcutrain.fleet.deploy import Fleet
    from mcutrain.fleet.processes import interrupt_on_sigterm

    interrupt_on_sigterm()  # SIGTERM ends the run as Ctrl-C does: everything started is stopped
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
    _check_outputs(cfg, kw["force"], kw["resume"])
    n = len(cfg.devices)
    echo = (lambda s: None) if kw["quiet"] else click.echo
    run = Fleet(
        cfg, on_round=lambda r: echo(_round_line(r, cfg.rounds, n, not cfg.twins)), on_status=echo, tls=kw["tls"]
    )
    run.prepare()
    echo(f"{n} devices, {cfg.rounds} rounds of {cfg.local_steps} steps, strategy {cfg.strategy} (Flower)")
    res = run.run(resume=kw["resume"])
    _summary(res, cfg)


def _check_outputs(cfg: Any, force: bool, resume: bool) -> None:
    """The global model and log may be written (with resume they are gone on from)."""
    if resume:
        if not cfg.output.is_file():
            raise CliError(f"--resume goes on from the global model {cfg.output}, which does not exist")
        return
    check_output(cfg.output, force, "global model")
    if cfg.log is not None:
        check_output(cfg.log, force, "log")


def _summary(res: Any, cfg: Any) -> None:
    done = [r for r in res.rounds if r.round > 0 and not r.failed]
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


# ---- a fleet over several machines ----
STATE_HELP = "Folder of this machine's fleet state (Flower's home with the SuperLink connection, logs)."


def _flower_env(state: Path) -> Any:
    from mcutrain.fleet.processes import flower_env

    return flower_env(state, state / "flwr-home")


@fleet.command("certs")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--host", "hosts", multiple=True, required=True, help="SuperLink host name or address; repeatable.")
@click.option("--node", "nodes", multiple=True, help="A node's name: makes its key pair; repeatable.")
@click.option("--force", is_flag=True, help="Replace certificates and keys in FOLDER.")
@example("""
mcutrain fleet certs fleet-certs --host coordinator.lan --host 192.0.2.10 --node kitchen --node hall
""")
def certs(folder: str, hosts: List[str], nodes: List[str], force: bool) -> None:
    """Make a CA, the SuperLink's TLS certificate (valid for every --host) and a key pair per --node for
    SuperNode authentication, into FOLDER. Copy ca.crt and a node's private key to its gateway; keep ca.key
    on the coordinator (or offline)."""
    from mcutrain.fleet.certs import make_certs

    out = Path(folder)
    if (out / "ca.crt").exists() and not force:
        raise CliError(f"{out} holds certificates already; pass --force to replace them")
    c = make_certs(out, list(hosts), list(nodes))
    click.echo(f"CA {c.ca}, SuperLink certificate {c.server_cert} (key {c.server_key})")
    for n, k in c.node_keys.items():
        click.echo(f"node {n}: private key {k}, public key {k}.pub")


@fleet.command("link")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on (0.0.0.0: every one).")
@click.option("--port", type=click.IntRange(1, 65535), default=9092, show_default=True, help="The SuperLink's port.")
@click.option("--certs", "certs_dir", type=click.Path(file_okay=False), default=None, help="Folder from `fleet certs`.")
@click.option("--no-auth", is_flag=True, help="TLS without SuperNode authentication (any node with the CA may join).")
@click.option("--insecure", is_flag=True, help="No TLS and no node authentication.")
@click.option("--allow-insecure", is_flag=True, help="Allow --insecure on an address other than 127.0.0.1.")
@click.option("--state", type=click.Path(file_okay=False), default="fleet-link", show_default=True, help=STATE_HELP)
@example("""
mcutrain fleet link --host 0.0.0.0 --port 9092 --certs fleet-certs
""")
def link(
    host: str, port: int, certs_dir: Optional[str], no_auth: bool, insecure: bool, allow_insecure: bool, state: str
) -> None:
    """Start Flower's SuperLink (the coordinator's end: nodes connect to it, `mcutrain fleet run` starts
    rounds on it) and keep it running until Ctrl-C. With --certs it serves TLS and accepts only the nodes
    whose keys were registered (`mcutrain fleet register`)."""
    from mcutrain.fleet.deploy import LinkSecurity, superlink_command, write_connection
    from mcutrain.fleet.node import check_transport
    from mcutrain.fleet.processes import interrupt_on_sigterm, start_process, stop_process

    if insecure == (certs_dir is not None):
        raise CliError("give --certs FOLDER (TLS and node authentication) or --insecure")
    check_transport(f"{host}:{port}", insecure, allow_insecure)
    sec = LinkSecurity()
    if certs_dir:
        c = Path(certs_dir).resolve()
        sec = LinkSecurity(c / "ca.crt", c / "server.pem", c / "server.key", auth=not no_auth)
        for f in (sec.ca, sec.cert, sec.key):
            if not Path(str(f)).is_file():
                raise CliError(f"{f} does not exist: make it with `mcutrain fleet certs {certs_dir} --host ...`")
    st = Path(state).resolve()
    env = _flower_env(st)
    local = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    write_connection(st / "flwr-home", f"{local}:{port}", sec.ca)
    interrupt_on_sigterm()
    p = start_process(superlink_command(host, port, sec, st / "superlink.db"), st / "superlink.log", env)
    click.echo(
        f"SuperLink on {host}:{port} ({'insecure' if insecure else 'TLS'}); log {st / 'superlink.log'}; Ctrl-C stops"
    )
    try:
        p.wait()
        raise CliError(f"the SuperLink ended with code {p.returncode}; see {st / 'superlink.log'}")
    finally:
        stop_process(p)


@fleet.command("register")
@click.argument("public_key", type=click.Path(dir_okay=False, exists=True))
@click.option("--state", type=click.Path(file_okay=False), default="fleet-link", show_default=True, help=STATE_HELP)
def register(public_key: str, state: str) -> None:
    """Let the node whose public key is PUBLIC_KEY (NAME.pub from `fleet certs`) join the SuperLink that
    `mcutrain fleet link` runs with this --state."""
    from mcutrain.fleet.deploy import register_node

    st = Path(state)
    if not (st / "flwr-home" / "config.toml").is_file():
        raise CliError(f"{st} has no SuperLink connection: start `mcutrain fleet link --state {st}` first")
    register_node(Path(public_key), _flower_env(st), st / "register.log")
    click.echo(f"registered {public_key}")


@fleet.command("node")
@click.option("--superlink", required=True, help="The SuperLink's HOST:PORT.")
@click.option("--device", "port", default=None, help="The board's serial port (e.g. /dev/ttyACM0).")
@click.option("--baud", type=click.IntRange(300), default=115200, show_default=True, help="Serial speed.")
@click.option("--board", default=None, help="A simulated board instead of a port (e.g. native); needs --model.")
@click.option(
    "--model", type=click.Path(dir_okay=False, exists=True), default=None, help="Model the simulated board runs."
)
@click.option(
    "--data", "data", required=True, type=click.Path(dir_okay=False, exists=True), help="The device's training data."
)
@click.option(
    "--eval", "eval_data", type=click.Path(dir_okay=False, exists=True), default=None, help="Its evaluation data."
)
@click.option("--classify", is_flag=True, help="Targets are integer class labels: make them one-hot.")
@click.option("--name", default=None, help="The device's name in the fleet [default: from --device or --board].")
@click.option(
    "--index",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="The device's number (seeds its sample order).",
)
@click.option(
    "--root-certificates", type=click.Path(dir_okay=False, exists=True), default=None, help="The fleet's ca.crt (TLS)."
)
@click.option("--auth-key", type=click.Path(dir_okay=False, exists=True), default=None, help="The node's private key.")
@click.option("--insecure", is_flag=True, help="No TLS (only to a SuperLink on this machine without --allow-insecure).")
@click.option(
    "--allow-insecure", is_flag=True, help="Allow --insecure to another machine: models travel in clear text."
)
@click.option(
    "--workdir", type=click.Path(file_okay=False), default="fleet-node", show_default=True, help="The node's folder."
)
@example("""
mcutrain fleet node --superlink coordinator.lan:9092 --device /dev/ttyACM0 --data kitchen.npz --classify \\
    --root-certificates ca.crt --auth-key kitchen --name kitchen
""")
def node(**kw: Any) -> None:
    """Put one device on the fleet: hold it (a board on a serial port, or a simulated board) and join the
    SuperLink as a Flower SuperNode whose ClientApps train it with WRITE/TRAIN/READ frames on its own data.
    Runs until Ctrl-C; a SuperNode that ends is started again (it rejoins the fleet)."""
    from mcutrain.fleet.config import DeviceSpec
    from mcutrain.fleet.deploy import build_simulated
    from mcutrain.fleet.node import NodeSpec, check_transport, run_node
    from mcutrain.fleet.processes import interrupt_on_sigterm
    from mcutrain.modelfile import load_model
    from mcutrain.sources import DataSettings

    interrupt_on_sigterm()  # a firmware build that SIGTERM interrupts is ended with it
    if (kw["port"] is None) == (kw["board"] is None):
        raise CliError("give the device: --device /dev/ttyACM0 (a board) or --board native --model M (simulated)")
    if not kw["insecure"] and not kw["root_certificates"]:
        raise CliError("give --root-certificates ca.crt (TLS; with --auth-key for node authentication) or --insecure")
    check_transport(kw["superlink"], kw["insecure"], kw["allow_insecure"])
    workdir = Path(kw["workdir"]).resolve()
    project = None
    if kw["board"]:
        if not kw["model"]:
            raise CliError("a simulated board needs the model it runs: --model start.mct")
        project = build_simulated(load_model(kw["model"]), kw["board"], workdir, "f32", "all", click.echo)
    name = kw["name"] or Path(kw["port"] or kw["board"]).name
    dev = DeviceSpec(
        name=name,
        data=Path(kw["data"]).resolve(),
        port=kw["port"],
        baud=kw["baud"],
        board=kw["board"],
        eval=Path(kw["eval_data"]).resolve() if kw["eval_data"] else None,
    )
    spec = NodeSpec(
        device=dev,
        superlink=kw["superlink"],
        folder=workdir / name,
        index=kw["index"],
        data=DataSettings(classify=kw["classify"]),
        project=project,
        root_certificates=Path(kw["root_certificates"]).resolve() if kw["root_certificates"] else None,
        auth_key=Path(kw["auth_key"]).resolve() if kw["auth_key"] else None,
        insecure=kw["insecure"],
    )
    run_node(spec, say=click.echo)


@fleet.command("run")
@click.argument("fleet_file", type=click.Path(dir_okay=False))
@click.option("--state", type=click.Path(file_okay=False), default="fleet-link", show_default=True, help=STATE_HELP)
@click.option("--rounds", type=click.IntRange(1), default=None, help="Rounds [default: the fleet file's].")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Global model file (.mct).")
@click.option("--log", type=click.Path(dir_okay=False), default=None, help="JSON-lines log.")
@click.option("--resume", is_flag=True, help="Go on after the last round of the global model file and its log.")
@click.option("--force", is_flag=True, help="Replace an existing global model or log.")
@example("""
mcutrain fleet run coordinator.toml --state fleet-link
""")
def run(fleet_file: str, state: str, **kw: Any) -> None:
    """Run the rounds of FLEET_FILE on the nodes of the SuperLink that `mcutrain fleet link` runs with this
    --state (on this machine: the ServerApp reads the fleet file's paths here). The fleet file lists its
    devices, or says how many nodes to wait for (nodes = N)."""
    from mcutrain.fleet.config import load_config
    from mcutrain.fleet.deploy import run_app
    from mcutrain.fleet.server import RoundReport

    st = Path(state)
    if not (st / "flwr-home" / "config.toml").is_file():
        raise CliError(f"{st} has no SuperLink connection: start `mcutrain fleet link --state {st}` first")
    cfg = load_config(fleet_file)
    over: dict = {"rounds": kw["rounds"]} if kw["rounds"] else {}
    if kw["output"]:
        over["output"] = Path(kw["output"]).resolve()
    if kw["log"]:
        over["log"] = Path(kw["log"]).resolve()
    cfg = dataclasses.replace(cfg, **over)
    _check_outputs(cfg, kw["force"], kw["resume"])

    def on_record(rec: dict) -> None:
        if rec.get("event") == "step":
            click.echo(_round_line(RoundReport.from_record(rec), cfg.rounds, cfg.n_nodes))

    from mcutrain.fleet.processes import interrupt_on_sigterm

    interrupt_on_sigterm()
    run_app(cfg, _flower_env(st), st / f"run-{Path(fleet_file).stem}", kw["resume"], on_record)
    click.echo(f"rounds done; global model {cfg.output}" + (f", log {cfg.log}" if cfg.log else ""))
