"""Built from runs of the loop: recipes, algorithm comparisons, lecture experiments, the demo."""
