from django.apps import AppConfig


class AgentSessionsConfig(AppConfig):
    # `sessions` is also django.contrib.sessions' label, which admin needs: ours gets its own.
    name = "sessions"
    label = "agent_sessions"
    verbose_name = "Sessions"
    default_auto_field = "django.db.models.BigAutoField"
