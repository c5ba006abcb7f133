"""Model sources: every command that takes a model resolves it here (`resolve_model`, `model_folder`) into an
ordinary Hugging Face folder. A folder is used as it is; a GGUF file (or an embedded model's, by name:
`rlvr.config.sources.EMBEDDED_MODELS`) is converted once into a folder in the cache and reused.

transformers reads GGUF through the `gguf` package and dequantizes every tensor to float32, but flags the model
as quantized and then refuses `save_pretrained`: the flags go (the weights are plain float32 by then) and the
folder is saved as any other (safetensors with the tied embedding once, config, tokenizer.json with its chat
template, generation config). Converting takes ~30 s on a CPU; a cached folder loads in under a second.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
from pathlib import Path

from rlvr.config.sources import NoModelThere, model_source
from rlvr.models.hf import quiet, save_model, write_folder

CACHE_ENV = "RLVR_CACHE_DIR"
_HASH_CHUNK = 1 << 22


def cache_root() -> Path:
    """$RLVR_CACHE_DIR, else $XDG_CACHE_HOME/rlvr, else ~/.cache/rlvr: converted models live in its models/."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlvr"


@functools.lru_cache(maxsize=16)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def file_digest(file: Path) -> str:
    """sha256 of `file`, computed once per process for a file of that size and modification time."""
    stat = file.stat()
    return _digest(str(file.resolve()), stat.st_size, stat.st_mtime_ns)


def cached_folder(file: Path) -> Path:
    """Where the folder converted from the GGUF `file` is cached: keyed by its content (name stem + sha256 prefix),
    so another file of the same name is converted anew and a moved one is not."""
    return cache_root() / "models" / f"{file.stem}-{file_digest(file)[:16]}"


def load_gguf(file: Path):
    """(model, tokenizer) read from a GGUF file, the weights dequantized to float32, the quantization flags
    dropped so that the model saves as an ordinary one."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(file.parent), file.name
    try:
        with quiet():
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ValueError(f"could not read a causal LM from {str(file)!r}: {err}") from err
    model.hf_quantizer = None  # the tensors are float32 now: nothing is quantized any more
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config._name_or_path = ""  # the GGUF's internal name, not a folder anyone can load
    return model.eval(), tokenizer


def convert_gguf(file: str | Path, out: str | Path) -> Path:
    """Write the Hugging Face folder `out` from the GGUF `file`, atomically (`save_model`)."""
    model, tokenizer = load_gguf(Path(file))
    return save_model(model, tokenizer, out)


def import_model(file: str | Path, out: str | Path) -> Path:
    """`rlvr model import`: the GGUF `file`'s folder written to `out` (atomically), copied from the cache (converted
    there first if it is not yet), so that a later run naming the file reuses the conversion too."""
    folder = converted(Path(file))
    return write_folder(out, lambda tmp: shutil.copytree(folder, tmp, dirs_exist_ok=True))


def converted(file: Path) -> Path:
    """The cached folder of the GGUF `file`, converted now if it is not there yet. A lock file serialises two
    processes converting the same file (test workers, a recipe's stages): the second finds the folder made."""
    folder = cached_folder(file)
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "config.json").is_file():
            logging.getLogger("rlvr").warning("converting %s into a Hugging Face folder, once (~30 s): %s", file.name,
                                              folder)
            convert_gguf(file, folder)
    return folder


def resolve_model(path: str | Path, key: str = "model.path") -> Path:
    """The Hugging Face folder `path` names (`rlvr.config.sources.model_source`): a folder as given, a GGUF file's
    or an embedded model's converted folder (from the cache). A Hub id or a missing package: ConfigError, one line
    naming `key`."""
    source = model_source(path, key)
    return source if source.is_dir() else converted(source)


# where rlvr's commands save their model in --out: `rlvr dpo`, `reward-model`, `rft` (beside metrics.json)
# and `rlvr sft`; an earlier run's --out is the natural --model of the next (to go on training it)
SAVED_MODELS = ("model", "sft_model")


def model_folder(path: str | Path, *, required: bool = True, key: str = "--model") -> Path:
    """The model folder `path` names: a GGUF file's or an embedded model's converted folder (`resolve_model`);
    `path` itself when it holds config.json, else the model an rlvr command saved in it when `path` is that
    command's --out folder: PATH/model (`rlvr dpo`, `reward-model`, `rft`) or PATH/sft_model (`rlvr sft`; not in
    an `rlvr train` run folder, with config.yaml, whose trained model is final_model, not its warm start).
    `required=False`: `path` as given when it names neither, for the caller's own check to say what is missing
    there; else FileNotFoundError. A Hub id or a missing package: ConfigError naming `key`."""
    try:
        path = resolve_model(path, key)
    except NoModelThere:
        path = Path(path)
    if (path / "config.json").is_file():
        return path
    for name in SAVED_MODELS:
        if (path / name / "config.json").is_file() and not (name == "sft_model" and (path / "config.yaml").exists()):
            return path / name
    if not required:
        return path
    raise FileNotFoundError(f"{str(path)!r} is neither a Hugging Face model folder (no config.json) nor the --out "
                      "folder of an rlvr command (no model/config.json or sft_model/config.json)")
