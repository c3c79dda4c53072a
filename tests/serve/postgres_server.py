"""A throwaway PostgreSQL server for tests, from the distribution's binaries (Debian: apt-get
install -y postgresql), in a temp folder on a free port, run as an unprivileged user (initdb
refuses root: as root it runs as the `postgres` account the package creates)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from pipedit.distributed.spawn import free_tcp_port

INSTALL_HINT = "PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install -y postgresql"
NO_ACCOUNT = "running as root without a 'postgres' account to run PostgreSQL as: apt-get install -y postgresql"


def run_as() -> str | None:
    """The account to run the server as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    pwd.getpwnam("postgres")  # KeyError: no such account
    return "postgres"


def find_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl (Debian keeps them off PATH), or None."""
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PostgresServer:
    def __init__(self, bin_dir: Path):
        self.bin_dir, self.port = bin_dir, free_tcp_port()
        self.user = run_as()
        self.root = Path(tempfile.mkdtemp(prefix="pipedit-pg-"))
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.data = self.root / "data"

    def start(self) -> "PostgresServer":
        self._run("initdb", "-D", str(self.data), "-U", "pipedit", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")
        return self

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://pipedit@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        from sqlalchemy import create_engine, text

        name = f"t_{uuid.uuid4().hex[:12]}"
        admin = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        admin.dispose()
        return self.url(name)

    def _run(self, tool: str, *args: str, check: bool = True) -> None:
        result = subprocess.run([str(self.bin_dir / tool), *args], user=self.user, cwd=self.root,
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"{tool} failed ({result.returncode}): {result.stderr or result.stdout}")
