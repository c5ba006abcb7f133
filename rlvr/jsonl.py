"""The one jsonl reader (every error names the file, the line and what is wrong with it) and the one writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Sequence


def read_jsonl(path: str | Path, required: Sequence[str] = (), what: str = "jsonl", *, missing_ok: bool = False,
               empty_ok: bool = True, growing: bool = False) -> list[dict[str, Any]]:
    """Rows of a jsonl file (`read_jsonl_located` without the places)."""
    return [row for _, row in read_jsonl_located(path, required, what, missing_ok=missing_ok, empty_ok=empty_ok,
                                                 growing=growing)]


def read_jsonl_located(path: str | Path, required: Sequence[str] = (), what: str = "jsonl", *,
                       missing_ok: bool = False, empty_ok: bool = True,
                       growing: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """(`path:LINE`, row) of a jsonl file, blank lines skipped, lines counted from 1 (for errors found
    later, in a row's values); each row a JSON object with string fields `required`.

    `missing_ok`: a missing file reads as no rows (a run's metrics before its first record);
    `empty_ok=False`: a file without rows is an error (training data); `growing`: the file is a log another
    process appends to (a running run's metrics), so a last line without its newline that does not parse
    is a record still being written, or cut by a crash, and is left out. A user with 50k rows needs to
    know which one is broken, so errors say `path:line: ...`.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what}: {str(path)!r} is a folder, not a jsonl file")
    if not path.is_file():
        if missing_ok:
            return []
        raise FileNotFoundError(f"{what} file {str(path)!r} does not exist")
    rows = []
    try:
        # utf-8-sig: a byte-order mark (Windows tools) is dropped; split on \n only: JSON strings may hold \x85
        lines = path.read_bytes().decode("utf-8-sig").split("\n")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if growing and lineno == len(lines):  # no newline after it: not yet (or never) finished
                break
            raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        rows.append((f"{path}:{lineno}", check_fields(row, required, f"{path}:{lineno}")))
    if not rows and not empty_ok:
        raise ValueError(f"{what} file {str(path)!r} is empty")
    return rows


def check_fields(row: Any, required: Sequence[str], where: str) -> dict[str, Any]:
    """`row` itself, after checking it is a dict with a string value for every required key."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object with fields {list(required)}, got {type(row).__name__}")
    missing = [k for k in required if k not in row]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}; each row needs {list(required)}")
    wrong = [k for k in required if not isinstance(row[k], str)]
    if wrong:
        raise ValueError(f"{where}: field(s) {wrong} must be strings")
    return row


def write_jsonl(path: str | Path, rows: Iterable[Any], *, append: bool = False) -> Path:
    """`rows` as one JSON object per line, UTF-8 with non-ASCII text kept, the folder made if needed; `append` adds
    them to an existing file. Dataclasses (e.g. `Example`) are written as their fields (`as_dict` where they
    have one); anything else JSON cannot hold is a TypeError naming its type."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=_jsonable) + "\n")
    return path


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    if hasattr(obj, "__dataclass_fields__"):
        return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")
