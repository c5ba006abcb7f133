"""Output folders of the commands that write results (`rlvr eval`, `rlvr experiment`): checked, and made,
before any work, so a bad --out is one line rather than an error after the work with its results lost."""

from __future__ import annotations

from pathlib import Path

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
