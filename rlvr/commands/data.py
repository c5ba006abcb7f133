"""`rlvr data ...`: curation steps on jsonl files.

    rlvr data decontaminate train.jsonl --eval gsm8k_test=test.jsonl --text-key question --out curated/
    rlvr data dedup train.jsonl --text-key question --threshold 0.8 --out curated/
    rlvr data fusion traces.jsonl --out fusion.jsonl          # Qwen3 /think + /no_think SFT pairs

Each filtering command writes `<out>/<step>.kept.jsonl` and its report (`<step>.removed.jsonl`,
`<step>.md`), <step> being `decontaminate` or `deduplicate`, and prints a one-line summary; outputs of an
earlier run in --out (or fusion's --out file) are refused without --overwrite, as the trainers refuse theirs.
The report names every removed row, and the row it duplicates
or the eval item it overlaps, by its file and line (`train.jsonl:7`, the file's real line: blank lines
count). A row with an empty text is bad input in every step, never a "duplicate": decontaminate and dedup
refuse a text field with no words (empty, blank or punctuation only: dedup called all such rows copies of
one another, and decontamination can check nothing in one), fusion an empty or blank prompt, reasoning or
answer (it would write a sample without it), and a prompt already carrying /think or /no_think (its row
would get two flags). The step stops before any work, exit code 2, with one line
naming the row by file:LINE (dedup and decontaminate also count the others); nothing is written.
`add_parser(subparsers)` registers `data` on `rlvr`.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from rlvr.commands.outputs import try_writing
from rlvr.config import check_out_dir
from rlvr.data.decontaminate import DEFAULT_MIN_WORDS, decontaminate
from rlvr.data.report import CurationResult
from rlvr.jsonl import write_jsonl
from rlvr.jsonl import read_jsonl_located
from rlvr.thinking.fusion import build_fusion_data, write_fusion_jsonl


def _eval_spec(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--eval takes NAME=PATH, got {text!r}")
    return name, Path(path)


def _check_out(out: str, overwrite: bool, *, folder: bool, outputs: Sequence[str] = (),
               inputs: Sequence[Path] = ()) -> None:
    """Before any work: --out can be written as a folder (or a file, `folder=False`), none of the `outputs`
    written there would replace an input, which is read first and would be lost, and none is there from an
    earlier run unless `overwrite` (as the trainers refuse it)."""
    path = Path(out)
    if not folder and path.is_dir():
        raise ValueError(f"--out: {out!r} is a folder; give a file path such as {str(path / 'fusion.jsonl')!r}")
    check_out_dir(path if folder else path.parent, "--out")
    targets = [path / name for name in outputs] if folder else [path]
    read = {p.resolve() for p in inputs}
    clash = next((t for t in targets if t.resolve() in read), None)
    if clash is not None:
        raise ValueError(f"--out: writing {str(clash)!r} would replace an input file; choose another --out")
    held = [t.name for t in targets if t.exists()]
    if held and not overwrite:
        where = f"{out!r} already holds {', '.join(held)}" if folder else f"{out!r} already exists"
        raise ValueError(f"--out: {where} from an earlier run; choose another --out or pass --overwrite")
    try_writing(path, "--out", folder)


@contextmanager
def _writing(out: str) -> Iterator[None]:
    """Write errors the checks cannot foresee (a full disk, /proc as root) still name --out."""
    try:
        yield
    except OSError as err:
        raise ValueError(f"--out: cannot write {str(err.filename or out)!r}: {err.strerror or err}") from None


def _located(path: str | Path, key: str, what: str, empty_ok: bool = True) -> tuple[list[str], list[dict]]:
    """(each row's `path:LINE`, the rows) of a jsonl whose rows all have a string field `key`."""
    located = read_jsonl_located(path, (key,), what, empty_ok=empty_ok)
    return [place for place, _ in located], [row for _, row in located]


def _finish(result: CurationResult, out: str) -> int:
    out_dir = Path(out)
    with _writing(out):
        write_jsonl(out_dir / f"{result.step}.kept.jsonl", result.kept)
        _, md = result.write_report(out_dir)
    print(f"{result.summary()}\nkept: {out_dir / f'{result.step}.kept.jsonl'}\nreport: {md}")
    return 0


def _outputs(step: str) -> list[str]:
    """What `_finish` writes in --out."""
    return [f"{step}.kept.jsonl", f"{step}.removed.jsonl", f"{step}.md"]


def _decontaminate(args: argparse.Namespace) -> int:
    min_words = min(DEFAULT_MIN_WORDS, args.n) if args.min_words is None else args.min_words
    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    if not 1 <= min_words <= args.n:
        raise ValueError(f"--min-words must be in [1, --n] = [1, {args.n}], got {min_words}")
    names = [name for name, _ in args.eval]
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise ValueError(f"--eval: name {twice!r} given twice")
    _check_out(args.out, args.overwrite, folder=True, outputs=_outputs("decontaminate"),
               inputs=[Path(args.input), *(path for _, path in args.eval)])
    # every row's text field checked here and each row's file:LINE kept, so a bad or removed row is named by it
    where, items = _located(args.input, args.text_key, "input")
    eval_key = args.eval_text_key or args.text_key
    evals = {name: _located(path, eval_key, f"--eval {name}", empty_ok=False)  # an empty set removes nothing
             for name, path in args.eval}
    result = decontaminate(items, {name: rows for name, (_, rows) in evals.items()}, text=args.text_key,
                           eval_text=eval_key, n=args.n, min_words=min_words, where=where,
                           eval_where={name: places for name, (places, _) in evals.items()})
    return _finish(result, args.out)


def _dedup(args: argparse.Namespace) -> int:
    from rlvr.data.dedup import deduplicate  # numpy: imported when the step runs, not for --help

    if not 0 < args.threshold <= 1:
        raise ValueError(f"--threshold must be in (0, 1], got {args.threshold}")
    if args.shingle < 1:
        raise ValueError(f"--shingle must be >= 1, got {args.shingle}")
    if args.num_perm < 1:
        raise ValueError(f"--num-perm must be >= 1, got {args.num_perm}")
    _check_out(args.out, args.overwrite, folder=True, outputs=_outputs("deduplicate"), inputs=[Path(args.input)])
    where, items = _located(args.input, args.text_key, "input")
    result = deduplicate(items, text=args.text_key, near=not args.exact_only, method=args.method,
                         threshold=args.threshold, shingle=args.shingle, num_perm=args.num_perm, where=where)
    return _finish(result, args.out)


def _fusion(args: argparse.Namespace) -> int:
    if not 0 <= args.unflagged_think <= 1:
        raise ValueError(f"--unflagged-think must be in [0, 1], got {args.unflagged_think}")
    _check_out(args.out, args.overwrite, folder=False, inputs=[Path(args.input)])
    located = read_jsonl_located(args.input, (), "input")  # fields checked by build_fusion_data, at file:LINE
    rows = build_fusion_data([row for _, row in located], prompt_key=args.prompt_key,
                             thinking_key=args.thinking_key, answer_key=args.answer_key,
                             completion_key=args.completion_key, unflagged_think=args.unflagged_think,
                             seed=args.seed, where=[place for place, _ in located])
    with _writing(args.out):
        path = write_fusion_jsonl(rows, args.out)
    print(f"fusion: {len(rows)} rows ({len(rows) // 2} prompts x /think + /no_think) -> {path}")
    return 0


def _overwrite(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--overwrite", action="store_true", help=f"replace the {what} of an earlier run in --out "
                        "(without it such an --out is refused before any work)")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "data", help="data curation: decontaminate, dedup, thinking-fusion data",
        description="Curation steps on jsonl files. decontaminate writes OUT/decontaminate.kept.jsonl, "
                    "OUT/decontaminate.removed.jsonl and OUT/decontaminate.md, dedup the same deduplicate.* files; "
                    "an --out that already holds them (or fusion's --out file) is refused without --overwrite. "
                    "The report names each removed row (and the row "
                    "it duplicates or the eval item it overlaps) by file:LINE. An empty text is refused in every "
                    "step, before any work (exit code 2, naming the row by file:LINE), never counted as a "
                    "duplicate: decontaminate and dedup refuse a --text-key field with no words (empty, blank or "
                    "punctuation only), fusion an empty or blank prompt, reasoning or answer, and a prompt that "
                    "already carries /think or /no_think (each row gets its own flag).")
    sub = parser.add_subparsers(dest="data_command", metavar="STEP", required=True)

    dc = sub.add_parser("decontaminate", help="drop items sharing an n-gram with an eval set")
    dc.add_argument("input", help="jsonl of training items")
    dc.add_argument("--eval", type=_eval_spec, action="append", required=True, metavar="NAME=PATH",
                    help="an eval set jsonl (repeatable)")
    dc.add_argument("--text-key", default="prompt", help="field holding the text (e.g. question)")
    dc.add_argument("--eval-text-key", default="", help="field of the eval items (default: --text-key)")
    dc.add_argument("--n", type=int, default=13, help="n-gram length (GPT-3: 13); a smaller n is never a weaker check")
    dc.add_argument("--min-words", type=int, default=None,
                    help="shortest overlap that counts when an item has fewer than --n words; at most --n "
                         f"(default: min({DEFAULT_MIN_WORDS}, --n); GPT-3: 8)")
    dc.add_argument("--out", required=True, help="output folder")
    _overwrite(dc, "decontaminate.* files")
    dc.set_defaults(func=_decontaminate)

    dd = sub.add_parser("dedup", help="drop exact and near duplicates (MinHash + exact Jaccard check)")
    dd.add_argument("input", help="jsonl of items")
    dd.add_argument("--text-key", default="prompt", help="field holding the text")
    dd.add_argument("--threshold", type=float, default=0.8, help="Jaccard similarity that counts as duplicate")
    dd.add_argument("--shingle", type=int, default=5, help="words per shingle")
    dd.add_argument("--method", choices=["minhash", "exact"], default="minhash",
                    help="candidate search: MinHash-LSH, or an exact inverted shingle index")
    dd.add_argument("--num-perm", type=int, default=128, help="MinHash permutations")
    dd.add_argument("--exact-only", action="store_true", help="only exact duplicates after normalisation")
    dd.add_argument("--out", required=True, help="output folder")
    _overwrite(dd, "deduplicate.* files")
    dd.set_defaults(func=_dedup)

    fu = sub.add_parser("fusion", help="Qwen3 thinking-mode fusion SFT data (/think and /no_think pairs)")
    fu.add_argument("input", help="jsonl with prompt + thinking + answer (or a <think>...</think> completion)")
    fu.add_argument("--prompt-key", default="prompt")
    fu.add_argument("--thinking-key", default="thinking")
    fu.add_argument("--answer-key", default="answer")
    fu.add_argument("--completion-key", default=None, help="parse reasoning and answer from this field instead")
    fu.add_argument("--unflagged-think", type=float, default=0.0,
                    help="share of thinking rows without the /think flag (thinking is the default mode)")
    fu.add_argument("--seed", type=int, default=0)
    fu.add_argument("--out", required=True, help="output jsonl file (not a folder)")
    _overwrite(fu, "file")
    fu.set_defaults(func=_fusion)
    return parser
