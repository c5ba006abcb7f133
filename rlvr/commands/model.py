"""`rlvr model import FILE.gguf --out DIR`: a GGUF file (or an embedded model, by name) as an ordinary Hugging
Face folder, written where you say. `model.path` and `--model` take the GGUF file or the name directly (converted
once into the cache, `rlvr.models.sources`); this command is for a folder of your own to keep, edit or copy.

    rlvr model import smollm2-135m-instruct --out models/smollm2
    rlvr model import ~/Downloads/model.Q4_K_M.gguf --out models/mine
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _import(args: argparse.Namespace) -> int:
    from rlvr.config.sources import model_source
    from rlvr.models import import_model
    from rlvr.train.preflight import check_output_folder

    source = model_source(args.source, "SOURCE")
    if source.is_dir():
        raise ValueError(f"SOURCE: {args.source!r} is a folder already; give a .gguf file or an embedded model's name")
    check_output_folder(Path(args.out).parent, [Path(args.out).name], args.overwrite)
    print(f"wrote {import_model(source, args.out)} (from {source})")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("model", help="model folders: import a GGUF file",
                                   description="Model folders. `import` converts a GGUF file (or an embedded "
                                               "model, e.g. smollm2-135m-instruct) into a Hugging Face folder.")
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    imp = sub.add_parser("import", help="convert a GGUF file into a Hugging Face folder (float32 safetensors, "
                                        "config, tokenizer with its chat template, generation config)")
    imp.add_argument("source", metavar="SOURCE", help="a .gguf file, or an embedded model's name "
                                                      "(smollm2-135m-instruct)")
    imp.add_argument("--out", required=True, help="the folder to write (written whole, then renamed into place)")
    imp.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    imp.set_defaults(func=_import)
