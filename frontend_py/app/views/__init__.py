"""HTML for the web app's parts, built from kit state; pure functions, no browser imports."""
