"""Proxmox VE: the API client facade, host facts and the container plan."""
