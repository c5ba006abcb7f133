"""Data files: the shared benchmark folder, and loading user jsonl/parquet files with a field map."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from rlvr.jsonl import read_jsonl, read_jsonl_located

DATA_ENV = "RLVR_DATA_DIR"


def data_dir() -> Path:
    """$RLVR_DATA_DIR, else `../shared/data` next to the repository (where GSM8K and MATH-500 live)."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    return (Path(__file__).resolve().parents[2] / ".." / "shared" / "data").resolve()


def shared_file(name: str) -> Path:
    path = data_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; set {DATA_ENV} to the folder holding {name}, "
                                f"or pass path= to the task")
    return path


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl / .json (list of objects) / .parquet file (parquet needs pyarrow)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} {'is a folder' if path.is_dir() else 'not found'}")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return read_jsonl(path, what="data")
    if suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of objects")
        return rows
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError(f"reading {path} needs pyarrow: pip install pyarrow") from None
        return pq.read_table(path).to_pylist()
    raise ValueError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .json or .parquet")


def record_place(path: str | Path, index: int) -> str:
    """Where row `index` (from 0) of `read_records(path)` is, for an error line: `path:LINE` in a jsonl file
    (blank lines are skipped when reading, so counted here), `path record N` in the others."""
    return record_places(path, index + 1)[index]


def record_places(path: str | Path, n: int) -> list[str]:
    """`record_place` of each of the `n` rows of `read_records(path)`, the file read once."""
    if Path(path).suffix.lower() != ".jsonl":
        return [f"{path} record {i + 1}" for i in range(n)]
    return [place for place, _ in read_jsonl_located(path)]


def _place(path: Any, n: int) -> str:
    return record_place(path, n - 1) if path and Path(path).is_file() else f"{path} record {n}".lstrip()


def map_fields(rows: list[Mapping[str, Any]], fields: Mapping[str, str], path: Any = "") -> list[dict]:
    """Rename columns: fields = {"question": "problem", "answer": "solution"} reads `problem` as
    the question. Every mapped column must exist in every row; the others are kept as they are."""
    out = []
    for n, row in enumerate(rows, 1):
        if not isinstance(row, Mapping):
            raise ValueError(f"{_place(path, n)}: expected an object with fields, got {type(row).__name__}")
        missing = [src for src in fields.values() if src not in row]
        if missing:
            raise ValueError(f"{_place(path, n)}: missing field(s) {missing}; it has {sorted(row)}")
        mapped = dict(row)
        mapped.update({dst: row[src] for dst, src in fields.items()})
        out.append(mapped)
    return out


def gsm8k_answer(solution: str) -> str:
    """GSM8K's ground truth: the number after '####', thousands separators removed."""
    if "####" not in solution:
        raise ValueError(f"not a GSM8K solution (no '####'): {solution[:80]!r}")
    return solution.split("####")[-1].strip().replace(",", "")
