"""Hosts with their own addresses for the tests: N network namespaces on a
private bridge, each with one veth and one address (10.77.0.11, .12, ...),
and a Ray cluster across them started with the project's own `ray`.

    with NetnsCluster(3) as hosts:          # namespaces, bridge, veths, addresses
        hosts.start_ray()                    # head in h1 (apex_learner), workers in h2.. (apex_actor)
        proc = hosts.popen(0, [sys.executable, "-m", "launch.train", ...])
        hosts.cut(1); ...; hosts.heal(1)     # a partition of h2 (its veth down, then up)

Everything is torn down by `down()` (also from `__exit__`, the pytest fixture's
finalizer and an atexit hook): every process inside the namespaces is killed
(found by namespace, `ip netns pids`, never by name: `ray stop` would kill
every Ray on this machine), then the namespaces and the bridge are deleted.
Names carry this process's pid (`anx<pid>...`), so a leftover of a crashed run
never blocks the next one; `up()` removes leftovers whose pid is gone. Only the
namespaces' own addresses are ever contacted: the bridge has no address and
no route leaves it.

Needs root and iproute2's `ip`; `unavailable()` names why not (tests skip with it).

A user can try the same from a shell: scripts/netns-cluster.sh up|status|down.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
SUBNET = "10.77.0"
FIRST_HOST = 11
RAY_PORT = 6379
_LEFTOVER = re.compile(r"^anx(\d+)(h\d+|br)$")


def _ip(*args: str, check: bool = True, ns: str | None = None) -> subprocess.CompletedProcess:
    cmd = ["ip", *args] if ns is None else ["ip", "netns", "exec", ns, "ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if sys.platform != "linux":
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); this process is not root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's `ip`, which is not on PATH"
    probe = f"anxprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_pids(ns: str) -> list[int]:
    got = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(p) for p in got.stdout.split() if p.isdigit()]


def _kill_namespace(ns: str, grace: float = 1.0) -> None:
    """SIGTERM to every process in `ns`, SIGKILL to what is left after `grace` s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _netns_pids(ns)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 10.0)
        while pids and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = _netns_pids(ns)
        if not pids:
            return


def sweep_leftovers() -> list[str]:
    """Deletes the namespaces and bridges of earlier harness runs whose process
    is gone (names anx<pid>h<i>, anx<pid>br); returns what it removed."""
    removed = []
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in names.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _LEFTOVER.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_namespace(name, grace=1.0)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    links = _ip("-o", "link", "show", "type", "bridge", check=False).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        m = _LEFTOVER.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("link", "del", name, check=False)
            removed.append(name)
    return removed


# Ray's GCS counts a node dead after health_check_failure_threshold failed
# checks of its raylet, health_check_period_ms apart: 5 x 3 s by default, 15 s
# when the checks fail at once (a channel in gRPC's reconnect back-off) rather
# than time out. apex decides when a cut actor is lost (its lease,
# cluster.actor_lost_after_seconds, 60 s + 5 s); Ray's verdict should come after
# it: 25 x 3 s = 75 s. docs/cluster.md recommends the same for a cluster.
RAY_HEALTH_CHECK = {
    "RAY_health_check_period_ms": "3000",
    "RAY_health_check_failure_threshold": "25",
}


class NetnsCluster:
    """`hosts` network namespaces on a private bridge (see the module docstring).

    Args:
      hosts: how many (h1..hN), each with address SUBNET.<FIRST_HOST + i>.
      prefix: the names' prefix (default anx<pid>; at most 10 characters, as
        interface names have at most 15).
      sysctls: kernel settings of each namespace's network stack, e.g.
        {"net.ipv4.tcp_rto_max_ms": "2000"} (set with sysctl -w in each).
      ray_health_check: Ray's health-check settings in the processes' environment
        (default RAY_HEALTH_CHECK; {}: Ray's own defaults).
    """

    def __init__(
        self,
        hosts: int = 3,
        prefix: str | None = None,
        sysctls: dict[str, str] | None = None,
        ray_health_check: dict[str, str] | None = None,
    ):
        if not 1 <= hosts <= 50:
            raise ValueError(f"hosts={hosts} is invalid: expected 1..50")
        self.prefix = prefix or f"anx{os.getpid()}"
        if len(self.prefix) > 10:
            raise ValueError(f"prefix={self.prefix!r} is longer than 10 characters")
        self.count = hosts
        self.bridge = f"{self.prefix}br"
        self.names = [f"{self.prefix}h{i + 1}" for i in range(hosts)]
        self.veths = [f"{self.prefix}v{i + 1}" for i in range(hosts)]  # the bridge's side
        self.ips = [f"{SUBNET}.{FIRST_HOST + i}" for i in range(hosts)]
        self.temp_dir = os.path.join(tempfile.gettempdir(), self.prefix)  # Ray's (short: sockets)
        self.ray_started = False
        self._up = False
        self._uts = shutil.which("unshare") is not None
        self.sysctls = dict(sysctls or {})
        self.ray_health_check = dict(
            RAY_HEALTH_CHECK if ray_health_check is None else ray_health_check
        )

    # ------------------------------------------------------------- set-up
    def up(self) -> NetnsCluster:
        """Makes the bridge, the namespaces, their veths and addresses."""
        sweep_leftovers()
        atexit.register(self.down)
        self._up = True
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            for name, veth, ip in zip(self.names, self.veths, self.ips):
                peer = f"{veth}p"
                _ip("netns", "add", name)
                _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
                _ip("link", "set", peer, "netns", name)
                _ip("link", "set", veth, "master", self.bridge, "up")
                _ip("link", "set", peer, "name", "eth0", ns=name)
                _ip("addr", "add", f"{ip}/24", "dev", "eth0", ns=name)
                _ip("link", "set", "eth0", "up", ns=name)
                _ip("link", "set", "lo", "up", ns=name)
                for key, value in self.sysctls.items():
                    subprocess.run(
                        ["ip", "netns", "exec", name, "sysctl", "-q", "-w", f"{key}={value}"],
                        check=True,
                        capture_output=True,
                        timeout=30,
                    )
        except BaseException:
            self.down()
            raise
        return self

    def __enter__(self) -> NetnsCluster:
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    def env(self) -> dict[str, str]:
        """The environment for processes in the namespaces (no proxies: only the
        namespaces' addresses are contacted; Ray's health check as
        RAY_HEALTH_CHECK says)."""
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env.update(
            RAY_USAGE_STATS_ENABLED="0",
            PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            **self.ray_health_check,
        )
        return env

    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """`argv` run inside host `host` (0-based): its network namespace, and a
        UTS namespace with the host's own hostname (its name), so that Ray and
        apex see hosts that differ by name as well as by address."""
        name = self.names[host]
        if not self._uts:
            return ["ip", "netns", "exec", name, *argv]
        rename = 'hostname "$0" && exec "$@"'
        return ["ip", "netns", "exec", name, "unshare", "--uts", "sh", "-c", rename, name, *argv]

    def popen(self, host: int, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("env", self.env())
        kwargs.setdefault("cwd", ROOT)
        return subprocess.Popen(self.command(host, argv), **kwargs)

    def run(self, host: int, argv: Sequence[str], timeout: float = 120, check: bool = True):
        got = subprocess.run(
            self.command(host, argv),
            env=self.env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and got.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} in {self.names[host]} failed ({got.returncode}): "
                f"{(got.stdout + got.stderr)[-2000:]}"
            )
        return got

    # ---------------------------------------------------------------- Ray
    def start_ray(
        self,
        head_cpus: int = 2,
        worker_cpus: int = 2,
        head_resources: dict | None = None,
        worker_resources: dict | None = None,
        timeout: float = 180.0,
    ) -> str:
        """The head in h1 (resource apex_learner), a worker in each other host
        (apex_actor), each `ray start --node-ip-address=<its own address>`;
        returns the head's address. Waits until every node is alive."""
        head_resources = {"apex_learner": 1} if head_resources is None else head_resources
        worker_resources = {"apex_actor": 1} if worker_resources is None else worker_resources
        ray = os.path.join(VENV_BIN, "ray")
        common = ["--disable-usage-stats", "--include-dashboard=false"]
        self.ray_started = True
        head = [
            ray,
            "start",
            "--head",
            f"--node-ip-address={self.ips[0]}",
            f"--port={RAY_PORT}",
            f"--num-cpus={head_cpus}",
            f"--resources={json.dumps(head_resources)}",
            f"--temp-dir={self.temp_dir}",
            *common,
        ]
        self._ray_start({0: head}, timeout)
        workers = {
            host: [
                ray,
                "start",
                f"--address={self.address}",
                f"--node-ip-address={self.ips[host]}",
                f"--num-cpus={worker_cpus}",
                f"--resources={json.dumps(worker_resources)}",
                *common[:1],
            ]
            for host in range(1, self.count)
        }
        for host, argv in workers.items():  # one at a time: they share Ray's session folder
            self._ray_start({host: argv}, timeout)
        self.wait_for_nodes(self.count, timeout)
        return self.address

    def _ray_start(self, commands: dict[int, list[str]], timeout: float, tries: int = 2) -> None:
        """Runs each host's `ray start`; one that fails (Ray gives a node 30 s to
        start, which a loaded machine can miss) is tried again after its
        namespace's processes are killed."""
        left = dict(commands)
        for attempt in range(tries):
            procs = {
                host: self.popen(
                    host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
                for host, argv in left.items()
            }
            failed = {}
            for host, proc in procs.items():
                out, _ = proc.communicate(timeout=timeout)
                if proc.returncode != 0:
                    failed[host] = out
            if not failed:
                return
            if attempt == tries - 1:
                host, out = next(iter(failed.items()))
                raise RuntimeError(f"ray start in {self.names[host]} failed: {out[-2000:]}")
            for host in failed:
                _kill_namespace(self.names[host])
            left = {host: commands[host] for host in failed}

    @property
    def address(self) -> str:
        return f"{self.ips[0]}:{RAY_PORT}"

    def alive_nodes(self) -> list[str]:
        """The IPs of the Ray nodes the head counts alive (asked from h1)."""
        script = (
            f"import json, ray; ray.init(address={self.address!r}, "
            f"_node_ip_address={self.ips[0]!r}, logging_level='ERROR', log_to_driver=False); "
            "print(json.dumps([n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']]))"
        )
        got = self.run(0, [sys.executable, "-c", script], check=False)
        try:
            return json.loads(got.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return []

    def wait_for_nodes(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        nodes: list[str] = []
        while time.monotonic() < deadline:
            nodes = self.alive_nodes()
            if len(nodes) >= count:
                return
            time.sleep(3.0)  # each look is a Ray driver: a few seconds of CPU
        raise RuntimeError(f"Ray has {len(nodes)} of {count} nodes alive: {nodes}")

    # ----------------------------------------------------------- the network
    def cut(self, host: int) -> None:
        """Partitions host `host` (0-based) off the others: its veth's bridge side down."""
        _ip("link", "set", self.veths[host], "down")

    def heal(self, host: int) -> None:
        _ip("link", "set", self.veths[host], "up")

    def link_bytes(self, host: int) -> tuple[int, int]:
        """(bytes the host sent, bytes it received) on its veth so far."""
        base = f"/sys/class/net/{self.veths[host]}/statistics"
        with open(f"{base}/rx_bytes") as f:  # the bridge side receives what the host sends
            sent = int(f.read())
        with open(f"{base}/tx_bytes") as f:
            received = int(f.read())
        return sent, received

    def pids(self) -> dict[str, list[int]]:
        """The processes inside each namespace."""
        return {name: _netns_pids(name) for name in self.names}

    def status(self) -> dict:
        existing = set(
            subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        )
        return {
            name: {
                "ip": ip,
                "exists": name in existing,
                "processes": len(_netns_pids(name)) if name in existing else 0,
            }
            for name, ip in zip(self.names, self.ips)
        }

    # ------------------------------------------------------------ tear-down
    def down(self) -> None:
        """Kills every process in the namespaces, deletes them and the bridge
        and Ray's temp folder. Safe to call twice."""
        if not self._up:
            return
        self._up = False
        existing = set(
            line.split()[0]
            for line in subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True
            ).stdout.splitlines()
            if line.split()
        )
        for name in self.names:
            if name in existing:
                _kill_namespace(name)
                _ip("netns", "del", name, check=False)
        for veth in self.veths:  # deleted with their namespaces' ends; in case one was not
            _ip("link", "del", veth, check=False)
        _ip("link", "del", self.bridge, check=False)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        try:
            atexit.unregister(self.down)
        except Exception:  # noqa: BLE001 - interpreter shutting down
            pass


def _main(argv: list[str]) -> int:
    """python -m tests.netns up [HOSTS] | status | down (scripts/netns-cluster.sh):
    a cluster that stays up between commands, named anxuser*."""
    import argparse

    parser = argparse.ArgumentParser(prog="scripts/netns-cluster.sh")
    parser.add_argument("action", choices=["up", "status", "down"])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true", help="namespaces only")
    args = parser.parse_args(argv)
    state_file = os.path.join(tempfile.gettempdir(), "anxuser.json")
    if args.action == "up":
        why = unavailable()
        if why:
            print(f"netns-cluster: {why}", file=sys.stderr)
            return 2
        if os.path.exists(state_file):
            print(f"netns-cluster: already up ({state_file}); run `down` first", file=sys.stderr)
            return 2
        c = NetnsCluster(args.hosts, prefix="anxuser")
        c.up()
        with open(state_file, "w") as f:
            json.dump({"hosts": args.hosts}, f)
        try:
            if not args.no_ray:
                c.start_ray()
        except BaseException:
            c.down()
            os.unlink(state_file)
            raise
        atexit.unregister(c.down)  # it stays up until `down`
        for name, ip in zip(c.names, c.ips):
            print(f"{name} {ip}")
        if not args.no_ray:
            print(f"ray_address={c.address}")
            print(
                "run the program from the head's host:\n"
                f"  ip netns exec {c.names[0]} ./scripts/train.sh --launcher=ray "
                f"--ray_address={c.address} --config.cluster.learner_resource=apex_learner "
                "--config.cluster.actor_resource=apex_actor\n"
                f"cut a host off: ip link set {c.veths[1]} down   (heal: ... up)"
            )
        return 0
    try:
        with open(state_file) as f:
            hosts = json.load(f)["hosts"]
    except OSError:
        print("netns-cluster: not up", file=sys.stderr)
        return 0 if args.action == "down" else 1
    c = NetnsCluster(hosts, prefix="anxuser")
    if args.action == "status":
        for name, st in c.status().items():
            print(f"{name} {st['ip']} exists={st['exists']} processes={st['processes']}")
        return 0
    c._up = True
    c.down()
    os.unlink(state_file)
    print("netns-cluster: down")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


@contextlib.contextmanager
def ray_cluster(hosts: int = 3, cpus: int = 2) -> Iterator[NetnsCluster]:
    """`hosts` namespaces with a Ray head in h1 and a worker in each other host,
    `cpus` each; torn down when the block ends, however it ends."""
    cluster = NetnsCluster(hosts)
    try:
        cluster.up()
        cluster.start_ray(head_cpus=cpus, worker_cpus=cpus)
        yield cluster
    finally:
        cluster.down()


class ClusterProgram:
    """The README's cluster command (the default CartPole program) run on host 0
    of `hosts` (the launcher) with --ray_address of the head; the learner on
    `apex_learner`, actors on `apex_actor`; `overrides` go last. Its output is
    collected in `lines` as it comes; `token` marks its processes (TOKEN_VAR)."""

    def __init__(self, hosts: NetnsCluster, run_dir: str, token: str, *overrides: str):
        import threading

        from tests.procs import TOKEN_VAR

        self.run_dir = run_dir
        env = hosts.env()
        env.update({TOKEN_VAR: token, "APEX_CHECK_NO_SHARED_FS": "1"})
        self.proc = hosts.popen(
            0,
            [
                sys.executable,
                "-m",
                "launch.train",
                "--config=configs/apex_cartpole.py",
                f"--config.run_dir={run_dir}",
                "--launcher=ray",
                f"--ray_address={hosts.address}",
                "--config.cluster.learner_resource=apex_learner",
                "--config.cluster.actor_resource=apex_actor",
                "--config.checkpoint.period_seconds=None",
                "--config.logging.tensorboard=False",
                "--config.logging.progress_period_seconds=1",
                *overrides,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(
            target=lambda: self.lines.extend(self.proc.stdout), daemon=True
        )
        self.reader.start()

    def tail(self, texts: Sequence[str], n: int) -> list[str]:
        """The last `n` output lines that hold any of `texts` (for a failure's message)."""
        return [line for line in list(self.lines) if any(t in line for t in texts)][-n:]

    def placement(self) -> dict:
        with open(os.path.join(self.run_dir, "placement.json")) as f:
            return json.load(f)

    def wait(self) -> str:
        """Waits for the launcher's exit (STOP_TIMEOUT); its whole output."""
        from tests.procs import STOP_TIMEOUT

        self.proc.wait(timeout=STOP_TIMEOUT)
        self.reader.join(timeout=10)
        return "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def summary(self) -> dict:
        with open(os.path.join(self.run_dir, "summary.json")) as f:
            return json.load(f)


def node_beat(run_dir: str, node: str) -> dict:
    """`node`'s last heartbeat in RUN_DIR ({} before its first)."""
    from apex import heartbeat as hb  # not on import: the script side stays light

    return hb.read_heartbeats(run_dir).get(node, {})


def metrics_rows(run_dir: str, node: str) -> list[dict]:
    """`node`'s metrics rows in RUN_DIR in time order ([] before the first)."""
    from apex import read_jsonl

    try:
        rows = read_jsonl(os.path.join(run_dir, "metrics", f"{node}.jsonl"))
    except OSError:
        return []
    return sorted(rows, key=lambda r: r["time"])
