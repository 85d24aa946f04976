"""Turnwise client: the pure-Python kit (``frontend_py.kit``) and the web app it powers."""
