"""The edge that touches the system: dry-run diffs, ``--apply`` and ``--revert``.

Writes are atomic (temp file in the same directory, fsync, rename). Every file is backed up
before its first change and every step is recorded in a journal under
``<root>/var/lib/ddpnet/`` before the next one, so ``--revert`` restores the tree byte for byte
even after a failed apply. Commands run only on the live root (``--root /``); with another
root they are listed and skipped.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ddpnet.errors import CheckFailed, ConfigError
from ddpnet.subproc import pid_alive, run_tool
from ddpnet.tune.model import Command, FileChange, Part, Plan

JOURNAL_DIR = "/var/lib/ddpnet"
JOURNAL = JOURNAL_DIR + "/journal.json"
BACKUPS = JOURNAL_DIR + "/backups"
COMMAND_TIMEOUT_S = 60

#: argv -> (returncode, combined output); injected in tests
Runner = Callable[[Sequence[str]], tuple[int, str]]


def system_runner(argv: Sequence[str]) -> tuple[int, str]:
    """The real runner: :func:`ddpnet.subproc.run_tool` bounded by ``COMMAND_TIMEOUT_S``, its
    stdout and stderr merged (127 and a line when the tool is absent, 124 when it hung)."""
    out = run_tool(argv, COMMAND_TIMEOUT_S)
    return out.returncode, out.merged


def under(root: Path, path: str) -> Path:
    """``path`` (absolute, as on the target system) inside ``root``, symlinks resolved, so a
    symlinked file is written where it points. A ConfigError when it leads out of the root
    (``..`` or a symlink), so a crafted journal cannot reach anything else."""
    base = root.resolve()
    rel = PurePosixPath(path.lstrip("/"))
    target = (base / rel).resolve()
    if ".." in rel.parts or (target != base and base not in target.parents):
        raise ConfigError(f"{path!r} leads outside --root {root} (to {target})",
                          "ddpnet only writes inside the root; check the journal under "
                          f"{JOURNAL_DIR} and any symlink on that path")
    return target


def _backup_name(name: str) -> str:
    """A journal's backup entry must be a plain file name inside the backups directory."""
    if not name or "/" in name or name in (".", ".."):
        raise ConfigError(f"journal names backup {name!r}, not a file in {BACKUPS}",
                          "the journal was edited by hand; restore it from a copy")
    return name


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class FileDiff:
    path: str
    action: str  # create | modify | unchanged
    diff: str
    mode: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "action": self.action, "mode": oct(self.mode),
                "diff": self.diff}


def diff_file(root: Path, fc: FileChange) -> FileDiff:
    current = _read(under(root, fc.path))
    new = fc.content.encode()
    if current == new:
        return FileDiff(fc.path, "unchanged", "", fc.mode)
    old_text = current.decode(errors="replace") if current is not None else ""
    diff = "".join(difflib.unified_diff(
        old_text.splitlines(keepends=True), fc.content.splitlines(keepends=True),
        fromfile="/dev/null" if current is None else f"a{fc.path}", tofile=f"b{fc.path}"))
    return FileDiff(fc.path, "create" if current is None else "modify", diff, fc.mode)


def dry_run(plan: Plan, root: Path) -> list[FileDiff]:
    return [diff_file(root, fc) for part in plan.parts for fc in part.files]


def atomic_write(path: Path, data: bytes, mode: int, like: os.stat_result | None = None) -> None:
    """Write via a temp file in the same directory and rename over ``path``, after removing
    temp files of this name that a killed run left behind."""
    _remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}{_TMP_TAG}{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if like is not None:
            os.chown(tmp, like.st_uid, like.st_gid)
            os.utime(tmp, ns=(like.st_atime_ns, like.st_mtime_ns))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


_TMP_TAG = ".ddpnet-"


def _remove_stale_temps(path: Path) -> None:
    """``.NAME.ddpnet-PID`` files beside ``path`` whose writer is gone (a kill -9)."""
    for tmp in path.parent.glob(f".{path.name}{_TMP_TAG}*"):
        pid = tmp.name.rsplit(_TMP_TAG, 1)[1]
        if pid.isdigit() and (int(pid) == os.getpid() or not pid_alive(int(pid))):
            tmp.unlink(missing_ok=True)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _entries(value: Any, *keys: str) -> bool:
    """A ``{path: {key: ...}}`` map as :meth:`Journal.save` writes it."""
    return isinstance(value, dict) and all(
        isinstance(e, dict) and all(k in e for k in keys) for e in value.values())


def _check_shape(raw: Any) -> None:
    """TypeError when a journal is not what :meth:`Journal.save` writes (damaged or crafted):
    revert must not fail half-way on a value of the wrong type."""
    if not (isinstance(raw, dict) and _strings(raw.get("dirs"))
            and _entries(raw.get("files"), "backup") and _entries(raw.get("touched"), "backup")
            and _entries(raw.get("parts"), "revert")):
        raise TypeError("not a ddpnet journal (dirs, files, touched, parts)")
    for entry in (*raw["files"].values(), *raw["touched"].values()):
        if not isinstance(entry["backup"], (str, type(None))):
            raise TypeError("a backup is neither a file name nor null")
    names = [*raw["dirs"], *raw["files"], *raw["touched"],
             *(e["backup"] or "" for e in (*raw["files"].values(), *raw["touched"].values()))]
    if any("\x00" in name for name in names):  # no path holds one; os calls refuse it
        raise TypeError("a path holds a NUL byte")
    if not all(name.strip("/") for name in (*raw["dirs"], *raw["files"], *raw["touched"])):
        raise TypeError("a path names the root itself")
    for entry in raw["parts"].values():
        _check_commands(entry["revert"])


#: the tools tune's own revert commands run: a journal naming anything else was not
#: written by ddpnet, and ``--revert`` runs as root
REVERT_TOOLS = frozenset({"sysctl", "nft", "iptables", "ip6tables", "firewall-cmd", "ufw"})


def _check_commands(commands: Any) -> None:
    if not isinstance(commands, list) or not all(
            isinstance(c, dict) and _strings(c.get("argv")) and _strings(c.get("unless", []))
            and _strings(c.get("onlyif", [])) for c in commands):
        raise TypeError("a part's revert commands are not argv lists")
    for c in commands:
        for argv in (c["argv"], c.get("unless", []), c.get("onlyif", [])):
            if any("\x00" in word for word in argv):
                raise TypeError("a revert command holds a NUL byte")
            if argv and argv[0] not in REVERT_TOOLS:
                raise TypeError(f"a revert command runs {argv[0]!r}, not one of tune's tools")
        if not c["argv"]:
            raise TypeError("a revert command is empty")


@dataclass
class Journal:
    """What ddpnet changed under one root; saved after every step."""

    root: Path
    dirs: list[str] = field(default_factory=list)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    touched: dict[str, dict[str, Any]] = field(default_factory=dict)
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return under(self.root, JOURNAL)

    @classmethod
    def load(cls, root: Path) -> Journal | None:
        path = under(root, JOURNAL)
        data = _read(path)
        if data is None:
            return None
        try:
            raw = json.loads(data)
            _check_shape(raw)
            return cls(root, list(raw["dirs"]), dict(raw["files"]), dict(raw["touched"]),
                       dict(raw["parts"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"journal {path} is unreadable ({exc})",
                              "restore it from a copy; ddpnet will not guess what it changed"
                              ) from None

    def save(self) -> None:
        self.ensure_dir(BACKUPS)
        data = {"version": 1, "dirs": self.dirs, "files": self.files,
                "touched": self.touched, "parts": self.parts}
        atomic_write(self.path, (json.dumps(data, indent=2) + "\n").encode(), 0o600)

    def ensure_dir(self, path: str) -> None:
        """Create ``path`` and missing parents, remembering which ones we created."""
        missing: list[Path] = []
        p = under(self.root, path)
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            d.mkdir(mode=0o755)
            rel = "/" + str(d.relative_to(self.root.resolve()))
            if rel not in self.dirs:
                self.dirs.append(rel)

    def backup(self, path: str) -> str | None:
        """Copy the file (bytes, mode, owner, times) into backups/; None if it is absent."""
        src = under(self.root, path)
        if not src.exists():
            return None
        self.ensure_dir(BACKUPS)
        name = path.strip("/").replace("/", "%")
        dst = under(self.root, BACKUPS) / name
        shutil.copy2(src, dst)
        st = src.stat()
        os.chown(dst, st.st_uid, st.st_gid)
        return name

    def restore(self, path: str, backup: str | None) -> None:
        target = under(self.root, path)
        if backup is None:
            target.unlink(missing_ok=True)
            return
        src = under(self.root, BACKUPS) / _backup_name(backup)
        if not src.is_file():
            raise ConfigError(f"the backup of {path} ({src}) is missing",
                              "restore it from a copy; ddpnet will not guess the old content")
        st = src.stat()
        atomic_write(target, src.read_bytes(), st.st_mode & 0o7777, like=st)


@dataclass
class Outcome:
    """What an apply or revert did, for the human and JSON output."""

    files: list[dict[str, str]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(f["action"] != "unchanged" for f in self.files) or any(
            c["status"] == "ran" for c in self.commands)

    def to_dict(self) -> dict[str, Any]:
        return {"changed": self.changed, "files": self.files, "commands": self.commands,
                "failed": self.failed}


def _run_cmd(cmd: Command, runner: Runner, out: Outcome, part: str) -> bool:
    if cmd.unless and runner(cmd.unless)[0] == 0:
        out.commands.append({"part": part, "argv": list(cmd.argv), "status": "already"})
        return True
    if cmd.onlyif and runner(cmd.onlyif)[0] != 0:
        out.commands.append({"part": part, "argv": list(cmd.argv), "status": "not needed"})
        return True
    rc, text = runner(cmd.argv)
    out.commands.append({"part": part, "argv": list(cmd.argv),
                         "status": "ran" if rc == 0 else f"failed ({rc})", "output": text})
    if rc != 0:
        last = text.splitlines()[-1] if text else ""
        out.failed.append(f"{' '.join(cmd.argv)}: exit {rc}: {last}")
    return rc == 0


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One apply/revert per root at a time (flock on the root directory itself, so the lock
    leaves nothing behind)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"another ddpnet tune --apply/--revert is running on {root}",
                              "wait for it to finish, then run again") from None
        yield
    finally:
        os.close(fd)


def _is_live(root: Path) -> bool:
    return root.resolve() == Path("/")


def apply(plan: Plan, root: Path, runner: Runner = system_runner,
          live: bool | None = None) -> Outcome:
    """Write every file, run every part's commands (only when ``live``: the root is ``/``);
    a second run changes nothing."""
    with _locked(root):
        return _apply(plan, root, runner, live)


def _apply(plan: Plan, root: Path, runner: Runner, live: bool | None) -> Outcome:
    journal = Journal.load(root) or Journal(root)
    live = _is_live(root) if live is None else live
    out = Outcome()
    for part in plan.parts:
        changed_files = False
        for fc in part.files:
            changed_files = _write_file(fc, root, journal, out) or changed_files
        if part.apply:
            _run_part(part, journal, runner, out, live=live, changed_files=changed_files)
    if journal.files or journal.parts:
        journal.save()
    return out


def _write_file(fc: FileChange, root: Path, journal: Journal, out: Outcome) -> bool:
    """Back the file up (first change only, journal saved before the write), write it
    atomically keeping an edited file's mode and owner; True when it changed."""
    target = under(root, fc.path)
    current = _read(target)
    new = fc.content.encode()
    if current == new:
        out.files.append({"path": fc.path, "action": "unchanged"})
        return False
    old_stat = target.stat() if current is not None else None
    if fc.path not in journal.files:
        journal.files[fc.path] = {
            "action": "modified" if current is not None else "created",
            "backup": journal.backup(fc.path) if current is not None else None,
        }
        journal.save()
    journal.ensure_dir(str(Path(fc.path).parent))
    mode = fc.mode
    if old_stat is not None and fc.mode == 0o644:
        mode = old_stat.st_mode & 0o7777  # an edited file keeps its mode
    atomic_write(target, new, mode, like=None)
    if old_stat is not None:
        os.chown(target, old_stat.st_uid, old_stat.st_gid)
    journal.files[fc.path]["sha256"] = _sha(new)
    journal.save()
    out.files.append({"path": fc.path, "action": "modify" if current is not None else "create"})
    return True


def _note_all(part: Part, out: Outcome, status: str) -> None:
    for c in part.apply:
        out.commands.append({"part": part.name, "argv": list(c.argv), "status": status})


def _run_part(part: Part, journal: Journal, runner: Runner, out: Outcome, *, live: bool,
              changed_files: bool) -> None:
    """Run a part's commands (live root only), once: unchanged parts are "already"; a part
    whose commands changed first reverts the previous ones. The journal records the revert
    commands before anything runs."""
    applied = [c.to_dict() for c in part.apply]
    prev = journal.parts.get(part.name)
    if not live:
        _note_all(part, out, "skipped (--root is not /)")
        return
    ran_before = bool(prev and prev.get("ran"))
    if prev and ran_before and prev["apply"] == applied and not changed_files:
        _note_all(part, out, "already")
        return
    if prev and ran_before and prev["apply"] != applied and not part.keep_first_revert:
        for c in prev["revert"]:
            _run_cmd(Command.from_dict(c), runner, out, part.name)
    for path in part.touches:
        if path not in journal.touched:
            journal.touched[path] = {"backup": journal.backup(path)}
    revert = prev["revert"] if prev and part.keep_first_revert else [
        c.to_dict() for c in part.revert]
    journal.parts[part.name] = {"apply": applied, "revert": revert, "ran": True}
    journal.save()
    for c in part.apply:
        if not _run_cmd(c, runner, out, part.name):
            journal.save()
            raise CheckFailed(
                f"tune --apply: part {part.name} failed: {out.failed[-1]}",
                "fix the cause and run --apply again, or undo everything with "
                "`ddpnet tune --revert`")


def revert(root: Path, runner: Runner = system_runner, live: bool | None = None) -> Outcome:
    """Undo every command and restore every file byte for byte; remove what we added."""
    with _locked(root):
        return _revert(root, runner, live)


def _revert(root: Path, runner: Runner, live: bool | None) -> Outcome:
    out = Outcome()
    journal = Journal.load(root)
    if journal is None:
        return out
    live = _is_live(root) if live is None else live
    for name in reversed(list(journal.parts)):
        entry = journal.parts[name]
        for c in entry["revert"]:
            cmd = Command.from_dict(c)
            if live and entry.get("ran"):
                _run_cmd(cmd, runner, out, name)
            else:
                out.commands.append({"part": name, "argv": list(cmd.argv),
                                     "status": "skipped (not applied here)"})
    for path, entry in journal.touched.items():
        journal.restore(path, entry["backup"])
        out.files.append({"path": path, "action": "restored"})
    for path in reversed(list(journal.files)):
        entry = journal.files[path]
        target = under(root, path)
        current = _read(target)
        if (current is not None and "sha256" in entry and _sha(current) != entry["sha256"]):
            out.failed.append(f"{path} was edited after ddpnet wrote it; restored anyway, "
                              f"your edit is in {path}.ddpnet-edited")
            shutil.copy2(target, target.with_name(target.name + ".ddpnet-edited"))
        journal.restore(path, entry["backup"])
        out.files.append({"path": path, "action": "removed" if entry["backup"] is None
                          else "restored"})
    shutil.rmtree(under(root, BACKUPS), ignore_errors=True)
    under(root, JOURNAL).unlink(missing_ok=True)
    for d in reversed(journal.dirs):
        with contextlib.suppress(OSError):  # not empty: something else lives there now
            under(root, d).rmdir()
    return out
