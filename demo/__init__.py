"""The demo (``make demo``): ``python -m demo`` sets up people, a team and a GitHub-events pipeline with a
runbook, starts it and feeds it real events until Ctrl-C (``scenario`` holds the parts); ``data/`` holds the
events and ``screenshots.py`` refreshes the README's screenshots from a running demo."""
