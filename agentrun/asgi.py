"""The ASGI entry point, what `manage.py up` and a production deployment serve
(`ops.server.server_argv`)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentrun.settings")

application = get_asgi_application()
