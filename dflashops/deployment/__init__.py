"""The deployment contract: what dflashops keeps in a container and how a command reaches it.

Every feature that works inside a container (launch, stop, logs, status, bench, tune,
``drafter push``) goes through this package, and only through it, for:

- :mod:`.layout`: every managed path in a container (engine venvs, ``/etc/dflashops`` with the
  launch script, ``server.json`` and ``deployed.json``, the server log, run-time state);
- :mod:`.manifest`: the one model of ``deployed.json`` (what is deployed and running), read and
  written here only;
- :mod:`.access`: a container's inventory name → a live SSH connection, and the address its
  server is reached at;
- :mod:`.playbooks`: the playbook that belongs to a container;
- :mod:`.api_key`: the server's API key, from the environment variable the playbook names;

It sits below the features and above ``remote``, ``inventory`` and ``playbook``; it never imports a
feature.
"""
