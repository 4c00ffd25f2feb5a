"""Real servers for the tests, started and stopped by the test itself, on loopback ports, with bounded waits: a
PostgreSQL server in a temporary data folder (Debian's `postgresql`, which `.ci/run` installs) and a Dask scheduler
with its workers (the course environment's `dask` commands)."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from twoprim.classroom.hub_checks import free_port  # (the tests' servers take theirs from it)

BIN = Path(sys.executable).parent


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise AssertionError("PostgreSQL is not installed: `apt-get install postgresql` (.ci/run does)")
    return Path(found[-1]).parent


class Postgres:
    """A PostgreSQL server of its own: a superuser `twoprim` whose random password reaches libpq only through
    PGPASSWORD (never a file), listening on 127.0.0.1:`port`. As root the server runs as the `postgres` account
    (PostgreSQL refuses to run as root)."""

    def __init__(self):
        self.bin = _pg_bin()
        # its own folder under /tmp (pytest's is 0700 to everyone but root, and the server runs as `postgres`)
        self.base = Path(tempfile.mkdtemp(prefix="twoprim-pg-", dir="/tmp"))
        self.data = self.base / "data"
        self.port = free_port()
        self.password = secrets.token_urlsafe(16)
        self.user: pwd.struct_passwd | None = None
        self.running = False
        if os.geteuid() == 0:
            try:
                self.user = pwd.getpwnam("postgres")
            except KeyError:
                self.user = pwd.getpwnam("nobody")

    def _run(self, *argv: str | Path | int, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        ids: dict[str, Any] = dict(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[]) if self.user else {}
        proc = subprocess.run(
            [str(a) for a in argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PGPASSWORD": self.password},
            **ids,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{Path(str(argv[0])).name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n{self.log()}"
            )
        return proc

    def init(self) -> Postgres:
        self.base.chmod(0o755)
        pwfile = self.base / "pw"
        pwfile.write_text(self.password)
        if self.user:
            shutil.chown(self.base, self.user.pw_uid, self.user.pw_gid)
            shutil.chown(pwfile, self.user.pw_uid, self.user.pw_gid)
        pwfile.chmod(0o600)
        self._run(
            self.bin / "initdb",
            "-D",
            self.data,
            "-U",
            "twoprim",
            "--pwfile",
            pwfile,
            "-A",
            "scram-sha-256",
            "--no-sync",
        )
        pwfile.unlink()
        return self

    def start(self) -> Postgres:
        self._run(
            self.bin / "pg_ctl",
            "-D",
            self.data,
            "-w",
            "-t",
            "60",
            "-l",
            self.base / "server.log",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.base} -c fsync=off",
            "start",
        )
        self.running = True
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run(self.bin / "pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop", check=False)
        self.running = False

    def createdb(self, name: str) -> str:
        """A new database; its URL (no password in it: libpq reads PGPASSWORD)."""
        self._run(self.bin / "createdb", "-h", "127.0.0.1", "-p", self.port, "-U", "twoprim", name)
        return f"postgresql://twoprim@127.0.0.1:{self.port}/{name}"

    def log(self) -> str:
        path = self.base / "server.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def remove(self) -> None:
        if self.running:
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


class DaskCluster:
    """`dask scheduler` and `dask worker` processes from the course environment, on loopback. Workers have no
    nanny, so a worker that is killed stays dead (its tasks go to the others)."""

    def __init__(self, base: Path, workers: int = 2, tls: dict[str, Path] | None = None):
        """`tls`: the files `grading.tls.cluster_certs` wrote; every connection then needs them (`tls://`)."""
        self.base = base
        self.port = free_port()
        self.address = f"{'tls' if tls else 'tcp'}://127.0.0.1:{self.port}"
        self.n = workers
        self.procs: dict[str, subprocess.Popen] = {}
        self.tls = tls
        self.tls_flags = (
            ["--tls-ca-file", str(tls["ca"]), "--tls-cert", str(tls["cert"]), "--tls-key", str(tls["key"])]
            if tls
            else []
        )
        self.security = None
        if tls:
            from distributed import Security

            self.security = Security(
                tls_ca_file=str(tls["ca"]),
                tls_client_cert=str(tls["cert"]),
                tls_client_key=str(tls["key"]),
                require_encryption=True,
            )

    def client(self, **kwargs):
        from distributed import Client

        return Client(self.address, security=self.security, **kwargs)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        with open(self.base / f"{name}.log", "w") as log:  # the server writes to its own copy of the descriptor
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs[name] = proc
        return proc

    def start(self) -> DaskCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "scheduler",
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-dashboard",
                "--no-show",
                *self.tls_flags,
                *(["--protocol", "tls"] if self.tls else []),
            ],
        )
        for i in range(self.n):
            self.restart(f"worker{i}", wait=False)
        self._wait()
        return self

    def restart(self, name: str, *, wait: bool = True) -> None:
        """Start worker `name` (again, after `kill`)."""
        self._spawn(
            name,
            [
                str(BIN / "dask"),
                "worker",
                self.address,
                "--nthreads",
                "1",
                "--no-nanny",
                "--name",
                name,
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--memory-limit",
                "0",
                "--local-directory",
                str(self.base / name),
                *self.tls_flags,
            ],
        )
        if wait:
            self._wait()

    def _wait(self, timeout: float = 90) -> None:
        """Until every worker has joined the scheduler; `workers`: name -> address."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.client(timeout=5) as client:
                    client.wait_for_workers(self.n, timeout=max(1, deadline - time.monotonic()))
                    self.workers = {info["name"]: addr for addr, info in client.scheduler_info()["workers"].items()}
                    return
            except (OSError, TimeoutError) as err:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"the Dask cluster did not start within {timeout:.0f} s:\n{self.logs()}"
                    ) from err
                time.sleep(0.5)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def restart_all(self) -> None:
        """A new scheduler on the same address and every worker again (after the scheduler was killed: its
        workers, which have no nanny, end without it)."""
        self.stop()
        self.start()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.base.glob("*.log")))

    def stop(self) -> None:
        """SIGTERM, then SIGKILL what is still running 5 s later, all of it together (a test's cluster holds
        nothing worth a wait; workers that lost their scheduler could each take the 5 s in turn)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
