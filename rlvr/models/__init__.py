"""Hugging Face models and tokenizers: load/save local folders, placement (device, dtype, LoRA), and a
tiny-model factory. `rlvr.models.lora` (PEFT) is imported only when LoRA is asked for."""

from rlvr.models.hf import disable_dropout, load_model, load_model_and_tokenizer, load_tokenizer, save_model
from rlvr.models.placement import Placement, engine_weights, load_policy, load_reference, resolve_placement, save_policy
from rlvr.models.sources import import_model, model_folder, resolve_model
from rlvr.models.tiny import PRESETS, build_tiny_model, make_tiny_model_dir, tiny_config
from rlvr.models.tokenizer import CHAT_TEMPLATE, DEFAULT_ALPHABET, build_char_tokenizer

__all__ = [
    "CHAT_TEMPLATE", "DEFAULT_ALPHABET", "PRESETS", "Placement", "build_char_tokenizer", "build_tiny_model",
    "import_model", "disable_dropout", "engine_weights", "load_model", "load_model_and_tokenizer", "load_policy",
    "load_reference", "load_tokenizer", "make_tiny_model_dir", "model_folder", "resolve_model", "resolve_placement",
    "save_model", "save_policy", "tiny_config",
]
