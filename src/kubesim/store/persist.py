"""The store on disk: one SQLite file (Python's ``sqlite3``) holding every object, the revision and a few facts about
the cluster (its address block), so a kubesim started again on the same file resumes where the last one stopped.

Writes are write-behind but never lost to a clean stop: every commit is staged, and the staged changes go to disk
in one transaction at the end of the event-loop iteration that made them (several writes of one object in a burst
become one row write); ``close()`` writes what is left. A kubesim killed with SIGKILL loses at most the writes of
its last iteration, as a crashed etcd member loses what it had not fsynced. The file is used by one kubesim at a
time (an exclusive ``flock``); its format is versioned, and a file of another format is refused with a clear error
instead of being half understood.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubesim.pidlock import LockHeld, PidLock

FORMAT = "kubesim-store/1"

Obj = dict[str, Any]
Row = tuple[str, str, str]  # (resource key, namespace or "", name)


class StoreFileError(Exception):
    """The store file cannot be used: held by another kubesim, of another format, or not a database."""


@dataclass
class Snapshot:
    """What a store file holds: the revision and every object (resource key, namespace, name, object)."""

    revision: int
    objects: list[tuple[str, str, str, Obj]] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.revision == 0


class StoreFile:
    """One SQLite file; ``put``/``drop`` stage changes, ``flush`` writes them in one transaction."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = PidLock(self.path.parent / f"{self.path.name}.lock")
        self._take_lock()
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS facts (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS objects (resource TEXT NOT NULL, namespace TEXT NOT NULL, "
                             "name TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (resource, namespace, name))")
            found = self.fact("format")
            if found is None:
                self._db.execute("INSERT INTO facts VALUES ('format', ?)", (FORMAT,))
            elif found != FORMAT:
                raise StoreFileError(f"{self.path} holds a cluster in format {found!r}, not {FORMAT!r}; remove it "
                                     "(or start with a fresh state) to begin a new cluster")
        except sqlite3.DatabaseError as error:
            self._lock.release()
            raise StoreFileError(f"{self.path} is not a kubesim store: {error}") from None
        except BaseException:
            self._lock.release()
            raise
        self._staged: dict[Row, Obj | None] = {}
        self._revision: int | None = None
        self._flush_scheduled = False
        self.writes = 0  # transactions written (for tests and measurements)

    # ----------------------------------------------------------------------------------------------- locking

    def _take_lock(self) -> None:
        """An exclusive lock on ``<file>.lock`` (holding our pid), removed again by ``close``."""
        try:
            self._lock.acquire()
        except LockHeld as held:
            raise StoreFileError(f"{self.path} is in use by another kubesim (pid {held.holder})") from None

    # ------------------------------------------------------------------------------------------------ reading

    def fact(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM facts WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_fact(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO facts VALUES (?, ?)", (key, value))

    def load(self) -> Snapshot:
        revision = int(self.fact("revision") or 0)
        facts = {str(k): str(v) for k, v in self._db.execute("SELECT key, value FROM facts")}
        objects = [(str(r), str(ns), str(n), json.loads(body)) for r, ns, n, body in
                   self._db.execute("SELECT resource, namespace, name, body FROM objects")]
        return Snapshot(revision, objects, facts)

    # ------------------------------------------------------------------------------------------------ writing

    def put(self, resource: str, namespace: str | None, name: str, obj: Obj, revision: int) -> None:
        """Stage ``obj`` as the object stored under (resource, namespace, name) from ``revision`` on."""
        self._staged[(resource, namespace or "", name)] = obj
        self._stage(revision)

    def drop(self, resource: str, namespace: str | None, name: str, revision: int) -> None:
        self._staged[(resource, namespace or "", name)] = None
        self._stage(revision)

    def _stage(self, revision: int) -> None:
        self._revision = revision
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()  # no loop to batch in: at once
            return
        self._flush_scheduled = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write every staged change (and the revision) in one transaction."""
        self._flush_scheduled = False
        if not self._staged and self._revision is None:
            return
        staged, self._staged = self._staged, {}
        revision, self._revision = self._revision, None
        puts = [(r, ns, n, json.dumps(obj, separators=(",", ":"))) for (r, ns, n), obj in staged.items()
                if obj is not None]
        drops = [row for row, obj in staged.items() if obj is None]
        with self._transaction() as db:
            if puts:
                db.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)", puts)
            if drops:
                db.executemany("DELETE FROM objects WHERE resource = ? AND namespace = ? AND name = ?", drops)
            if revision is not None:
                db.execute("INSERT OR REPLACE INTO facts VALUES ('revision', ?)", (str(revision),))
        self.writes += 1

    @contextlib.contextmanager
    def _transaction(self) -> Any:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        """Write what is staged and let go of the file."""
        if not self._lock.held:
            return
        try:
            self.flush()
            self._db.close()
        finally:
            self._lock.release()
