"""ASGI entry point: what uvicorn serves (`ops.server.server_argv`), in `up` and in production.

ASGI rather than WSGI because a waiting request (a long-poll today, an SSE stream next)
must cost neither a worker thread nor a database connection: under a threaded WSGI server
every waiter holds a thread, and four of them starved `/healthz` for 30 s. Here the waiting
views are async (`run_events` in runs/api/long_poll.py) and sleep on the event loop; every
other view is sync Django run in a thread by the handler, as usual.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentrun.settings")
os.environ["AGENTRUN_DB_POOL_ENABLED"] = "1"  # the server pools its connections (settings)
application = get_asgi_application()
