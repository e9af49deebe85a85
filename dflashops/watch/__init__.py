"""``dflashops watch``: a live view of a running server, one window per refresh.

Every ``interval`` seconds ``/metrics`` is scraped (``scraper``) and read into a ``Reading``
(``reading``); two consecutive readings make one ``WatchWindow`` (``window``): output tok/s,
the running batch, and the spec-decode acceptance over the window. Where ``/metrics`` has no
spec-decode counters (SGLang), the server log's lines of the same window stand in when the
container's log is reachable (``log_follow``). ``loop`` paces the scrapes and never stops on a
failed one; ``session`` finds a container's endpoint and log, as ``bench`` does; ``text`` says a
window in words for the line and the table.
"""
