from django.apps import AppConfig


class AgentrunConfig(AppConfig):
    name = "agentrun"
    verbose_name = "agentrun access"
    default_auto_field = "django.db.models.BigAutoField"
