"""Output files and folders of the commands that write results (`rlvr eval`, `rlvr report`, `rlvr experiment`,
`rlvr data`):
checked, and made, before any work, so a bad --out is one line rather than an error after the work with its
results lost, and never a file the command did not write itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from rlvr.config import check_out_dir


def check_out_folder(folder: str | Path, flag: str, files: tuple[str, ...] = ()) -> Path:
    """`folder` is one, or can become one, that we may write in, and none of `files` (what the command writes
    there) is a folder: a bad `flag` is one line before any work, not an error after it with the results lost."""
    path = Path(folder)
    check_out_dir(path, flag)
    if folders := [name for name in files if (path / name).is_dir()]:
        raise ValueError(f"{flag}: {str(path / folders[0])!r} is a folder; the results are written there as a file")
    return path


def make_out_folder(path: Path, flag: str) -> Path:
    """`path` made, missing parents too, still before any work (/proc/x passes every check but this one)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{flag}: cannot make the folder {str(path)!r} ({err.strerror})") from None
    return path


def resolve_out_file(out: str | None, default: Path, flag: str, ours: Callable[[Path], bool], what: str) -> Path:
    """The file a command writes: `default` without `out`; `out` itself, or `default.name` inside it when it is
    a folder or ends in a slash (a folder, made later if missing). An existing file is written over only when
    `ours` recognises it as an earlier output (`what`) of the command: `--out RUN/metrics.jsonl` or
    `--out MODEL/model.safetensors` was replaced, exit 0."""
    if out is not None and not out.strip():  # Path('') is the current folder: results would land where one stands
        raise ValueError(f"{flag}: empty path; give a file, or a folder to write {default.name} in")
    path = default if out is None else Path(out)
    if out is not None and (path.is_dir() or out.endswith(("/", os.sep))):
        path = path / default.name
    if path.is_dir():
        raise ValueError(f"{flag}: {str(path)!r} is a folder; the results are written there as a file")
    if path.exists() and not ours(path):
        raise ValueError(f"{flag}: {str(path)!r} exists and is not {what}; refusing to write over it "
                         "(choose another file)")
    try_writing(path, flag)
    return path


def try_writing(path: Path, flag: str, folder: bool = False) -> None:
    """Make `path` (a folder, or a file and its folder) and remove again what was made: a path every check
    passes but the system refuses (/proc/x, even as root) is found now, not at the write after the work.
    A file that is there is opened for appending and left as it was."""
    target = path if folder else path.parent
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"{flag}: {str(existing)!r} is a file, not a folder")
    made = [p for p in (target, *target.parents) if not p.exists()]
    try:
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            what = "write" if folder else "make the folder"
            raise ValueError(f"{flag}: cannot {what} {str(target)!r} ({err.strerror or err})") from None
        if not folder:
            if not path.exists():
                made.insert(0, path)
            try:
                with open(path, "a", encoding="utf-8"):  # appends nothing to a file that is there
                    pass
            except OSError as err:
                raise ValueError(f"{flag}: cannot write {str(path)!r} ({err.strerror or err})") from None
    finally:
        for p in made:  # innermost first
            if p.is_file():
                p.unlink()
            elif p.is_dir():
                p.rmdir()
