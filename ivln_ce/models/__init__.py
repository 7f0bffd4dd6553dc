"""Torch modules: encoders, the CMA family, MAP-CMA, RedNet, official weight loading."""
