"""Settings of cell 2's gunicorn: agentrun's own, with the bench's URLconf.

Everything else (middleware, DRF's authentication, parser and renderer, the pooled
database, logging) is `agentrun.settings` unchanged, so the bench's reference views
(`bench.http_floor`) pay what the real endpoint pays. Only the bench's server loads this
module; agentrun's URLconf stays free of bench code.
"""

from agentrun.settings import *  # noqa: F403  (the whole of agentrun's settings)

ROOT_URLCONF = "bench.http_urls"
