from django.apps import AppConfig


class AgentrunConfig(AppConfig):
    name = "agentrun"
    verbose_name = "agentrun access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentrun import schema  # registers the OpenAPI auth extension

        del schema
