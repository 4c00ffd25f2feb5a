"""Limits that protect a class from one student: each user's server and its kernels get a memory and a CPU limit.

Two layers, set by the hub (root) as it starts a server (`ClassroomSpawner`, JupyterHub's LocalProcessSpawner with
the limits added before it drops to the user's account):

- A control group per user (`cgroup`), when the machine lets root make one: the server and every process it starts
  (kernels, terminals) share `--memory-mb` of memory and `--cpus` of CPU time. Over the memory limit the kernel
  kills the largest process of that group only (the runaway kernel, never a classmate's); JupyterLab says the kernel
  died and restarts it, the next cell the student runs says why and what to do (notices.py), and the hub's log
  names the student and the limit. cgroup v2 (`memory.max`, `cpu.max`) or
  v1 (`memory.limit_in_bytes`, `cpu.cfs_quota_us`), made inside the hub's own group so a limit set on the hub (a
  container's) still holds. Why not systemd (jupyterhub-systemdspawner): it needs systemd as PID 1, which a
  container (this course's CI among them) does not have; a control group is what systemd would make.
- An address-space limit (RLIMIT_AS) on each process, the grading sandbox's: an allocation far beyond any limit
  (`bytearray(64 * 2**30)`) fails at once with MemoryError in the student's own notebook, and the kernel lives on.
  It needs no control group, so it holds on every machine.

Beside them, the compute threads of a user's kernels match their CPU limit: torch, MKL and OpenBLAS would otherwise
start a thread per core of the machine, which a limit of one core throttles (the threads wait for CPU time the group
does not have) and which makes 30 students' kernels fight over every core.
"""

from __future__ import annotations

import contextlib
import resource
from dataclasses import dataclass
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Float, Int

from twoprim.classroom.notices import CGROUP_ROOT, oom_kills_in, own_path
from twoprim.grading.sandbox import MEMORY_LIMIT_BYTES, THREAD_VARIABLES

GROUP = "twoprim-classroom"
PERIOD_US = 100_000


@dataclass(frozen=True)
class Hierarchy:
    """Where one user's group lives: cgroup v2 (one folder for both limits) or v1 (one per controller)."""

    version: int
    memory: Path  # the folder of GROUP in the memory hierarchy (v2: the unified one)
    cpu: Path

    def user(self, name: str) -> tuple[Path, ...]:
        """The user's folders (one on v2, memory and cpu on v1)."""
        return tuple(dict.fromkeys((self.memory / name, self.cpu / name)))


def find_hierarchy(root: Path = CGROUP_ROOT) -> Hierarchy | None:
    """The hierarchy this machine lets root make user groups in (below the hub's own group), or None."""
    try:
        own = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    if (root / "cgroup.controllers").exists():  # v2, unified at the root
        path = own_path("", own)
        controllers = (root / "cgroup.controllers").read_text().split()
        if path is None or not {"memory", "cpu"} <= set(controllers):
            return None
        return Hierarchy(2, root / path / GROUP, root / path / GROUP)
    memory, cpu = own_path("memory", own), own_path("cpu", own)
    if memory is None or cpu is None or not (root / "memory").is_dir() or not (root / "cpu").is_dir():
        return None
    return Hierarchy(1, root / "memory" / memory / GROUP, root / "cpu" / cpu / GROUP)


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def make_user_group(hierarchy: Hierarchy, name: str, memory_bytes: int, cpus: float) -> tuple[Path, ...]:
    """The user's group with its limits (made when missing, limits written each time); its folders."""
    for folder in dict.fromkeys((hierarchy.memory, hierarchy.cpu)):
        folder.mkdir(exist_ok=True)
    if hierarchy.version == 2:
        for parent in (hierarchy.memory.parent, hierarchy.memory):  # the controllers reach the users' groups
            _write(parent / "cgroup.subtree_control", "+memory +cpu")
        folder = hierarchy.memory / name
        folder.mkdir(exist_ok=True)
        _write(folder / "memory.max", str(memory_bytes))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
        _write(folder / "cpu.max", f"{int(cpus * PERIOD_US)} {PERIOD_US}")
        return (folder,)
    memory, cpu = hierarchy.memory / name, hierarchy.cpu / name
    memory.mkdir(exist_ok=True)
    cpu.mkdir(exist_ok=True)
    _write(memory / "memory.limit_in_bytes", str(memory_bytes))
    _write(cpu / "cpu.cfs_period_us", str(PERIOD_US))
    _write(cpu / "cpu.cfs_quota_us", str(int(cpus * PERIOD_US)))
    return memory, cpu


def oom_kills(hierarchy: Hierarchy, name: str) -> int:
    """How many processes of the user's group the kernel has killed for going over its memory limit."""
    return oom_kills_in(hierarchy.memory / name, hierarchy.version)


def remove_user_group(hierarchy: Hierarchy, name: str) -> None:
    """The user's group, once no process is left in it (a group with processes stays: rmdir refuses)."""
    for folder in hierarchy.user(name):
        with contextlib.suppress(OSError):
            folder.rmdir()


class ClassroomSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose servers (and their kernels) start inside the user's limits."""

    memory_mb = Int(0, help="memory of each user's server and kernels together, MB (0: no control group)").tag(
        config=True
    )
    cpus = Float(1.0, help="CPU time of each user's server and kernels together, in cores").tag(config=True)
    address_space = Int(MEMORY_LIMIT_BYTES, help="RLIMIT_AS of each process, bytes (0: none)").tag(config=True)
    _oom_seen = 0

    def get_env(self):
        """JupyterHub's environment for the server, with its kernels' compute threads set to the user's whole cores
        (at least one), unless the configuration set them."""
        env = super().get_env()
        for variable in THREAD_VARIABLES:
            env.setdefault(variable, str(max(1, int(self.cpus))))
        return env

    def make_preexec_fn(self, name):
        """Enter the user's group and set RLIMIT_AS (as root, in the child), then drop to the user."""
        drop = super().make_preexec_fn(name)
        hierarchy = find_hierarchy() if self.memory_mb else None
        folders: tuple[Path, ...] = ()
        if hierarchy is not None:
            try:
                folders = make_user_group(hierarchy, name, self.memory_mb * 2**20, self.cpus)
                self._oom_seen = oom_kills(hierarchy, name)
            except OSError as err:
                self.log.warning(
                    "classroom limits: no control group for %s (%s): only the address-space limit holds", name, err
                )
        elif self.memory_mb:
            self.log.warning(
                "classroom limits: this machine has no writable cgroup hierarchy; %s's server gets only "
                "the address-space limit",
                name,
            )
        address_space = self.address_space

        def preexec():
            for folder in folders:
                _write(folder / "cgroup.procs", "0")  # this process, and so everything it starts
            if address_space:
                resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
            drop()

        return preexec

    async def poll(self):
        """JupyterHub's poll, and a line in the hub's log when a process of the user was killed for memory."""
        status = await super().poll()
        hierarchy = find_hierarchy() if self.memory_mb else None
        if hierarchy is not None:
            kills = oom_kills(hierarchy, self.user.name)
            if kills > self._oom_seen:
                self.log.warning(
                    "classroom limits: %s went over their memory limit of %d MB: the kernel stopped "
                    "their largest process (%d time(s)); JupyterLab restarts the kernel, the other "
                    "students are untouched",
                    self.user.name,
                    self.memory_mb,
                    kills - self._oom_seen,
                )
                self._oom_seen = kills
        return status

    async def stop(self, now=False):
        """Stop the server with SIGTERM (then SIGKILL after `term_timeout`), then remove the user's group.

        Never SIGINT first, as LocalProcessSpawner does: a Jupyter server without a terminal takes SIGINT as a
        KeyboardInterrupt that ends its event loop without its shutdown (its kernels are left to notice their
        parent has gone), and the SIGTERM that follows then has no loop left to stop; measured on a loaded
        machine, such a server stayed up 30 s after SIGINT and 30 s after SIGTERM, a whole minute of Ctrl-C on
        `./course hub` (or of one cull). SIGTERM is its clean stop: extensions, kernels and terminals shut down,
        then it exits."""
        await super().stop(now=True)
        hierarchy = find_hierarchy() if self.memory_mb else None
        if hierarchy is not None:
            remove_user_group(hierarchy, self.user.name)


def remove_groups(root: Path = CGROUP_ROOT) -> None:
    """Every user group of the classroom, and GROUP itself (when the hub stops: empty ones only)."""
    hierarchy = find_hierarchy(root)
    if hierarchy is None:
        return
    for parent in dict.fromkeys((hierarchy.memory, hierarchy.cpu)):
        if parent.is_dir():
            for folder in parent.iterdir():
                if folder.is_dir():
                    remove_user_group(Hierarchy(hierarchy.version, parent, parent), folder.name)
            with contextlib.suppress(OSError):
                parent.rmdir()


def protected(plan, args):
    """`plan` (hub_config.Plan) with ./course hub's limits from `args`, each checked: a CourseError that says what
    to do."""
    import dataclasses

    from twoprim.core.errors import CourseError

    for flag, value in (
        ("--memory-mb", args.memory_mb),
        ("--cpus", args.cpus),
        ("--cull-idle", args.cull_idle),
        ("--max-servers", args.max_servers),
    ):
        if value < 0:
            raise CourseError(f"{flag} {value:g} is negative: give 0 (no limit) or a positive number")
    if 0 < args.memory_mb < 256:
        raise CourseError(
            f"--memory-mb {args.memory_mb} is too little for a JupyterLab server and a kernel: give "
            f"at least 256 (2048 is the default)"
        )
    if args.cpus == 0:
        raise CourseError("--cpus 0 would stop every server: give a share of a core, e.g. 0.5, or 1 (the default)")
    quotas = {}  # the exchange service's, per student and assignment
    for flag, name in (("--max-submissions", "max_submissions"), ("--max-stored-mb", "max_stored_mb")):
        value = getattr(args, name, None)
        if value is not None and not value > 0:
            raise CourseError(
                f"{flag} {value:g} is not a positive number: give the most each student may keep of an assignment"
            )
        if value is not None:
            quotas[name] = value
    return dataclasses.replace(
        plan,
        memory_mb=args.memory_mb,
        cpus=args.cpus,
        cull_idle_s=args.cull_idle,
        max_servers=args.max_servers,
        **quotas,
    )
