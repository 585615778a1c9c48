"""Drills that check a running serving stack keeps its promises (`ray-dspine drill`, cli.py).

corpus.py holds the bad-input corpus; exchange.py sends and classifies one request; scenarios.py, kill.py and
soak.py run the scenarios; result.py counts them and prints the table; rss.py measures the local Ray
cluster's memory; settings.py holds the typed settings.
"""
