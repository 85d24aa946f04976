"""`turnwise hook`: Claude Code's and Codex's hooks reporting to Turnwise (see `main.py`). Imports
nothing of the server: only the standard library."""
