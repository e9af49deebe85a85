"""The engine venv in a container (``/opt/dflashops/venv-<engine>-<version>``) and dflashops' own
wheel inside it: facts → plan → apply."""
