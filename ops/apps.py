from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "ops"
    label = "ops"
    verbose_name = "agentrun operations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Worker and beat heartbeats start from Celery's own signals (ops.heartbeats).
        from ops import heartbeats

        heartbeats.install()
