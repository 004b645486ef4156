"""Example recipes: models, data and generators that show the trainer on real-shaped tasks.

Kept outside the `trainer` package so the library stays free of model code and image libraries.
"""
