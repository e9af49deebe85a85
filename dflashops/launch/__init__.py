"""Deploy a playbook to a container and run it: render, diff, push, (re)start, readiness,
failure diagnosis and rollback, and the server's lifecycle.

Entry points (import them from their modules; this package imports nothing, so ``--help``
stays fast):

* :func:`dflashops.launch.core.launch` → :class:`dflashops.launch.report.LaunchReport`
* :func:`dflashops.launch.status.server_status` → :class:`dflashops.launch.status.ServerStatus`
* :mod:`dflashops.launch.control`: ``stop_server``, ``restart_server``, ``read_logs``,
  ``follow_logs``
"""
