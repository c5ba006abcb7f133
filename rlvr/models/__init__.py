"""Hugging Face models and tokenizers: load/save local folders, and a tiny-model factory."""

from rlvr.models.hf import disable_dropout, load_model, load_model_and_tokenizer, load_tokenizer, save_model
from rlvr.models.tiny import PRESETS, build_tiny_model, make_tiny_model_dir, tiny_config
from rlvr.models.tokenizer import CHAT_TEMPLATE, DEFAULT_ALPHABET, build_char_tokenizer

__all__ = [
    "CHAT_TEMPLATE", "DEFAULT_ALPHABET", "PRESETS", "build_char_tokenizer", "build_tiny_model", "disable_dropout",
    "load_model", "load_model_and_tokenizer", "load_tokenizer", "make_tiny_model_dir", "save_model",
    "tiny_config",
]
