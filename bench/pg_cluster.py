"""A throwaway PostgreSQL cluster from the machine's own server binaries.

Used by the PostgresStore tests (tests/cells, property_tests) and its bench. The
cluster lives in a temporary directory and listens only on a unix socket there
(`listen_addresses = ''`: no TCP at all), with trust authentication for its own
superuser. `stop()` shuts it down and removes the directory.

Finding the binaries: `$PG_BINDIR` if set, else the directory of an `initdb` on
PATH, else the newest `/usr/lib/postgresql/<version>/bin` (Debian and Ubuntu keep
them there, off PATH), else a few other usual places. `make test` installs the
Debian `postgresql` package when none is found (tools/system-deps.sh).

Running as root: initdb and postgres refuse to run as root, so the server runs as
an unprivileged user (`postgres` if it exists, else `nobody`) that owns the
temporary directory; the client (root) reaches its socket all the same.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

_DEBIAN_GLOB = "/usr/lib/postgresql/*/bin"
_OTHER_DIRS = ("/usr/local/pgsql/bin", "/usr/pgsql-*/bin", "/opt/homebrew/opt/postgresql*/bin")


class ClusterError(RuntimeError):
    """The cluster could not be found, created or started (the message says which)."""


def _version_of(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path)) or (0,)


def find_bindir() -> str:
    """The directory holding `initdb`, `pg_ctl` and `postgres`; raises ClusterError."""
    candidates: list[str] = []
    env = os.environ.get("PG_BINDIR")
    if env:
        candidates.append(env)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(os.path.dirname(os.path.realpath(on_path)))
    candidates += sorted(glob.glob(_DEBIAN_GLOB), key=_version_of, reverse=True)
    for pattern in _OTHER_DIRS:
        candidates += sorted(glob.glob(pattern), key=_version_of, reverse=True)
    for directory in candidates:
        if all(os.access(os.path.join(directory, b), os.X_OK) for b in ("initdb", "pg_ctl")):
            return directory
    raise ClusterError(
        "no PostgreSQL server binaries (initdb, pg_ctl) found: looked at $PG_BINDIR, PATH and"
        f" {_DEBIAN_GLOB}; install the Debian package `postgresql` (make test does, as root)"
    )


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise ClusterError("running as root, and neither a `postgres` nor a `nobody` user exists")


def _base_dir(user: pwd.struct_passwd | None) -> str | None:
    """Where the cluster's directory goes: the usual temporary directory, but /tmp when
    the server runs as another user (it must reach the directory) or when the usual one
    is so deep that the socket path would pass the unix limit (about 107 bytes)."""
    usual = tempfile.gettempdir()
    if os.path.isdir("/tmp") and (user is not None or len(usual) > 60):
        return "/tmp"
    return None


class Cluster:
    """One running throwaway server. `dsn` connects to its `postgres` database."""

    def __init__(self, bindir: str | None = None) -> None:
        self.bindir = bindir or find_bindir()
        self.user = _server_user()
        self.directory = tempfile.mkdtemp(prefix="cellweave-pg-", dir=_base_dir(self.user))
        self.data = os.path.join(self.directory, "data")
        self.socket_dir = self.directory
        self.superuser = "cellweave"
        self.port = 5432  # only names the socket file; nothing listens on TCP
        self._running = False
        try:
            if self.user is not None:
                os.chown(self.directory, self.user.pw_uid, self.user.pw_gid)
            self._run(
                "initdb",
                "-D",
                self.data,
                "-U",
                self.superuser,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
                "--no-instructions",
            )
            settings = {
                "listen_addresses": "''",
                "unix_socket_directories": f"'{self.socket_dir}'",
                "fsync": "off",
                "full_page_writes": "off",
                "max_connections": "200",
            }
            with open(os.path.join(self.data, "postgresql.conf"), "a") as conf:
                conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
            self._start()
            self._running = True
        except BaseException:
            self.stop()
            raise

    @property
    def dsn(self) -> str:
        return f"host={self.socket_dir} port={self.port} user={self.superuser} dbname=postgres"

    def dsn_for(self, dbname: str) -> str:
        return f"host={self.socket_dir} port={self.port} user={self.superuser} dbname={dbname}"

    def _run(self, binary: str, *args: str) -> None:
        kwargs: dict[str, Any] = {}
        if self.user is not None:
            kwargs.update(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
            kwargs["env"] = {**os.environ, "HOME": self.directory}
        done = subprocess.run(
            [os.path.join(self.bindir, binary), *args],
            capture_output=True,
            text=True,
            cwd=self.directory,
            check=False,
            **kwargs,
        )
        if done.returncode != 0:
            log = ""
            with (
                contextlib.suppress(OSError),
                open(os.path.join(self.directory, "server.log")) as f,
            ):
                log = f.read()[-2000:]
            raise ClusterError(
                f"{binary} {' '.join(args)} failed ({done.returncode}):"
                f" {done.stdout[-1000:]}{done.stderr[-1000:]}{log}"
            )

    def restart(self, *, crash: bool = True) -> None:
        """Stop the server (closing every connection) and start it again.

        `crash=True` stops it as a crash would (`-m immediate`: no checkpoint, WAL
        recovery at the next start); False shuts it down cleanly."""
        self.stop_server(crash=crash)
        self._start()

    def _start(self) -> None:
        log = os.path.join(self.directory, "server.log")
        self._run("pg_ctl", "-D", self.data, "-l", log, "-w", "-t", "60", "start")
        self._running = True

    def stop_server(self, *, crash: bool = True) -> None:
        """Stop the server, as a crash would by default (see `restart`)."""
        if self._running:
            mode = "immediate" if crash else "fast"
            self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")
            self._running = False

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        try:
            self.stop_server()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()
