"""Drills that check the serving stack keeps its promises: the bad-input corpus (corpus.py)."""
