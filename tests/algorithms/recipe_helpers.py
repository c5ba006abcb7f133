"""What the recipe tests share: the shipped recipes' folder and one good data row of each kind."""

from __future__ import annotations

from pathlib import Path

RECIPES = Path(__file__).resolve().parents[2] / "configs" / "recipes"
TRACE = {"prompt": "sort 3 1 2=", "thinking": "sorted: 1 2 3", "answer": "1 2 3"}  # a fusion record
DEMO = {"prompt": "sort 3 1 2=", "completion": "1 2 3"}  # an SFT pair
